import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';

/** A named check of one backend; throws when the backend does not answer. */
export interface ReadinessCheck {
  readonly name: string;
  /** Optional backends (Redis) degrade the service but never make it unready but in the strict form. */
  readonly optional?: boolean;
  /**
   * Without an essential backend (the database) an instance serves only what it holds in memory;
   * without any other (the object store) it still serves lists and content kept in the database.
   */
  readonly essential?: boolean;
  check(): Promise<void>;
}

/**
 * Where this instance is in its life (D31): it takes traffic only while `serving`. `serve` moves it
 * on: `starting` until it listens with the change log followed, `draining` from the stop signal on.
 */
export class InstanceState {
  state: 'starting' | 'serving' | 'draining';

  constructor(state: InstanceState['state'] = 'serving') {
    this.state = state;
  }
}

/** What `/readyz` asks, beside the checks: whether this instance can serve anything on its own. */
export interface Readiness {
  readonly checks: readonly ReadinessCheck[];
  readonly instance?: InstanceState;
  /**
   * Whether the instance holds answers it can serve while a required dependency is down (D31); an
   * instance that can serve nothing is not ready.
   */
  readonly servesFromMemory?: () => boolean;
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

const ReadyQuery = Type.Object(
  {
    strict: Type.Optional(
      Type.Boolean({
        description: 'fail when any required dependency is down, whatever this instance holds',
      }),
    ),
  },
  { additionalProperties: false },
);

/**
 * `/healthz` (the process is up) and `/readyz` (D18, D31), no credential. `/readyz` says whether this
 * instance should get traffic: not while it starts or drains, nor when it can serve nothing (the
 * database is down and it holds nothing to serve). A dependency that every instance shares being down
 * is reported in the body but takes no instance out by itself, so that a load balancer does not mark
 * every instance failed at once; `?strict=true` fails when any dependency is down, Redis included.
 */
export function operationsRoutes(readiness: Readiness): FastifyPluginAsyncTypebox {
  const instance = readiness.instance ?? new InstanceState();
  return async (app) => {
    app.get('/healthz', { schema: { hide: true, response: { 200: Health } } }, async (_request, reply) => {
      reply.header('cache-control', 'no-store');
      return { status: 'ok' };
    });

    app.get(
      '/readyz',
      { schema: { hide: true, querystring: ReadyQuery, response: { 200: Health, 503: Health } } },
      async (request, reply) => {
        reply.header('cache-control', 'no-store');
        const results = await Promise.all(readiness.checks.map(async (c) => [c, await run(c)] as const));
        const checks = Object.fromEntries(results.map(([c, result]) => [c.name, result]));
        const down = (which: (c: ReadinessCheck) => boolean) =>
          results.some(([c, result]) => result !== 'ok' && which(c));
        let status: string;
        if (instance.state !== 'serving') status = instance.state;
        else if (request.query.strict === true) status = down(() => true) ? 'unavailable' : 'ready';
        else if (!down((c) => !c.optional)) status = 'ready';
        else if (!down((c) => c.essential === true) || readiness.servesFromMemory?.()) status = 'degraded';
        else status = 'unavailable';
        const ready = status === 'ready' || status === 'degraded';
        reply.code(ready ? 200 : 503);
        return { status, checks };
      },
    );
  };
}
