/**
 * The object floor of `npm run bench`: what a JSON API on Fastify does at least to send the service's
 * own answers. A bare Fastify server, logger off, no authentication, no validation. A JSON answer
 * captured from the service is parsed once and serialised again on every request, as any JSON API
 * does; a compressed answer is sent as the captured bytes. The buffer floor (buffer-floor.ts) is the
 * least a Node.js server can do at all.
 *
 * Usage: node floor.js <answers.json> <port>
 */
import fs from 'node:fs';
import Fastify from 'fastify';

export interface FloorRoute {
  readonly path: string;
  /** The captured status: the buffer floor sends it as it was; this one sends 200. */
  readonly status: number;
  /** The captured body, base64. */
  readonly body: string;
  /** `application/json` answers are parsed once and serialised per request; others are sent as bytes. */
  readonly json: boolean;
  readonly headers: Record<string, string>;
}

async function main(): Promise<void> {
  const [file, port] = process.argv.slice(2);
  if (file === undefined || port === undefined) throw new Error('usage: floor.js <answers.json> <port>');
  const routes = JSON.parse(fs.readFileSync(file, 'utf8')) as FloorRoute[];
  const app = Fastify({ logger: false });
  for (const route of routes) {
    const bytes = Buffer.from(route.body, 'base64');
    if (route.json) {
      const value: unknown = JSON.parse(bytes.toString('utf8'));
      app.get(route.path, async (_request, reply) => reply.headers(route.headers).send(value));
    } else {
      app.get(route.path, async (_request, reply) => reply.headers(route.headers).send(bytes));
    }
  }
  app.get('/ready', async () => ({ ready: true }));
  await app.listen({ port: Number(port), host: '127.0.0.1' });
}

await main();
