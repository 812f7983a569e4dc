/**
 * The floor of `npm run bench:scale`'s cold reads: the least work a Fastify server can do for a
 * Resource detail that is not in memory. A bare Fastify server, logger off: it hashes the presented key and
 * looks the hash up, reads the detail's answer, stored whole with a validator (the `answers` table
 * that scale-data.ts writes beside the naive service's), by one search, and sends its text as it is.
 * Nothing is kept in memory but the key's hash: every read is a cold read, one search of a table whose
 * rows fit a page each.
 *
 * Usage: node cold-floor.js <database file> <port> <api key>
 */
import { createHash } from 'node:crypto';
import Fastify from 'fastify';
import { sqliteDriver } from '../src/db/create-db.js';

const [file, port, key] = process.argv.slice(2);
if (!file || !port || !key) throw new Error('usage: cold-floor.js <database file> <port> <api key>');

const hashOf = (presented: string) => createHash('sha256').update(presented).digest('hex');
const keyHash = hashOf(key);
const Driver = sqliteDriver();
const db = new Driver(file, { readonly: true });
db.pragma('journal_mode = WAL');
const byId = db.prepare<[string], { etag: string; body: string }>(
  'select etag, body from answers where id = ?',
);

const app = Fastify({ logger: false });
app.get('/ready', async () => ({ ready: true }));
app.get<{ Params: { id: string } }>('/v3/playbook/resources/:id', async (request, reply) => {
  const presented = request.headers['x-api-key'];
  if (typeof presented !== 'string' || hashOf(presented) !== keyHash) {
    return reply.code(401).send({ code: 'unauthenticated' });
  }
  const answer = byId.get(request.params.id);
  if (!answer) return reply.code(404).send({ code: 'not_found' });
  return reply
    .header('content-type', 'application/json; charset=utf-8')
    .header('etag', answer.etag)
    .header('cache-control', 'private, no-cache')
    .send(answer.body);
});
await app.listen({ port: Number(port), host: '127.0.0.1' });
