import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';

/** A named check of one backend; throws when the backend does not answer. */
export interface ReadinessCheck {
  readonly name: string;
  /** Optional backends degrade the service but do not make it unready. */
  readonly optional?: boolean;
  check(): Promise<void>;
}

const CHECK_TIMEOUT_MS = 2000;

async function run(check: ReadinessCheck): Promise<'ok' | 'unavailable'> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error('timed out')), CHECK_TIMEOUT_MS);
  });
  try {
    await Promise.race([check.check(), timeout]);
    return 'ok';
  } catch {
    return 'unavailable';
  } finally {
    clearTimeout(timer);
  }
}

const Health = Type.Object({
  status: Type.String(),
  checks: Type.Optional(Type.Record(Type.String(), Type.String())),
});

/** `/healthz` and `/readyz` (D18): no credential. */
export function operationsRoutes(checks: readonly ReadinessCheck[]): FastifyPluginAsyncTypebox {
  return async (app) => {
    app.get('/healthz', { schema: { hide: true, response: { 200: Health } } }, async (_request, reply) => {
      reply.header('cache-control', 'no-store');
      return { status: 'ok' };
    });

    app.get(
      '/readyz',
      { schema: { hide: true, response: { 200: Health, 503: Health } } },
      async (_request, reply) => {
        const results = await Promise.all(checks.map(async (c) => [c, await run(c)] as const));
        const ready = results.every(([c, result]) => result === 'ok' || c.optional);
        reply.code(ready ? 200 : 503).header('cache-control', 'no-store');
        return {
          status: ready ? 'ready' : 'unavailable',
          checks: Object.fromEntries(results.map(([c, result]) => [c.name, result])),
        };
      },
    );
  };
}
