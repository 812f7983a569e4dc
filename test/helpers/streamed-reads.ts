import http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import v8 from 'node:v8';
import { runInNewContext } from 'node:vm';
import zlib from 'node:zlib';
import type { TSchema } from '@sinclair/typebox';
import Fastify, { type FastifyInstance } from 'fastify';
import { v7 as uuidv7 } from 'uuid';
import type { Authenticator } from '../../src/auth/authenticator.js';
import type { Principal } from '../../src/auth/principal.js';
import { buildApp } from '../../src/composition/app.js';
import type { Db } from '../../src/db/tables.js';
import { Problem } from '../../src/schemas/common.js';
import { playbookSchemas, type ResourcePin } from '../../src/schemas/playbook.js';
import { unlimited } from './app.js';
import { loggedDb, type TestBackend } from './backend.js';
import { givenCatalog, givenStoredPins } from './fixtures.js';
import { type ReadSide, readSide } from './read-side.js';

/**
 * What the tests of answers written as they are read (D30) share: a read side over a connection that
 * counts the statements reading stored pins, callers named by `x-api-key`, Catalogs of many pins, raw
 * HTTP reads, and the live heap measured while an answer is received.
 */

/** The caller is the account named by `x-api-key` (`nobody` for none). */
class AccountAuthenticator implements Authenticator {
  async authenticate(request: { headers: Record<string, unknown> }): Promise<Principal> {
    const accountId = String(request.headers['x-api-key']);
    return principalOf(accountId === 'nobody' ? null : accountId);
  }
}

export function principalOf(accountId: string | null): Principal {
  return {
    accountId,
    plan: 'free',
    scopes: new Set(['playbook:read']),
    credential: { kind: 'api-key', keyId: accountId ?? 'nobody' },
    restrictions: null,
  };
}

/** A second connection to the backend's database that counts the statements reading stored pins. */
export function countingDb(backend: TestBackend, counted: { pinReads: number }): Db {
  return loggedDb(
    backend,
    (event) => {
      if (event.level === 'query' && /from "catalog_version_pins"/.test(event.query.sql)) counted.pinReads++;
    },
    4,
  );
}

/** A value serialized at once by a route whose response is `schema`: an answer's bytes before D30. */
export async function wholeSerializer(schema: TSchema) {
  const app = Fastify();
  app.addSchema(Problem);
  for (const playbookSchema of playbookSchemas) app.addSchema(playbookSchema);
  let value: unknown;
  app.get('/whole', { schema: { response: { 200: schema } } }, async () => value);
  await app.ready();
  return async (whole: unknown): Promise<string> => {
    value = whole;
    return (await app.inject({ url: '/whole' })).body;
  };
}

export function pinsOf(owner: 'svc' | 'org', slug: string, count: number, label = (i: number) => `1.${i}`) {
  return Array.from(
    { length: count },
    (_, i): ResourcePin => ({
      resourceId: uuidv7(),
      resourceHumanRef: `${owner}/${slug}/resource-${String(i).padStart(6, '0')}`,
      resourceVersionId: uuidv7(),
      version: label(i),
      contentHash: 'a'.repeat(64),
    }),
  );
}

/** A catalog of `pins`, published as its current version. */
export async function givenPublished(
  db: Db,
  accountId: string | null,
  slug: string,
  pins: readonly ResourcePin[],
  name?: string,
) {
  const catalog = await givenCatalog(db, { slug, accountId, ...(name === undefined ? {} : { name }) });
  const version = await givenStoredPins(db, catalog.id, '1.0.0', pins);
  await db
    .updateTable('catalogs')
    .set({ current_version_id: version })
    .where('id', '=', catalog.id)
    .execute();
}

export interface Received {
  readonly status: number;
  readonly headers: http.IncomingHttpHeaders;
  readonly body: Buffer;
}

export function get(
  port: number,
  path: string,
  headers: Record<string, string>,
  method = 'GET',
): Promise<Received> {
  return new Promise((resolve, reject) => {
    http
      .request({ host: '127.0.0.1', port, path, headers, method }, (answer) => {
        const chunks: Buffer[] = [];
        answer.on('data', (chunk: Buffer) => chunks.push(chunk));
        answer.on('end', () =>
          resolve({ status: answer.statusCode ?? 0, headers: answer.headers, body: Buffer.concat(chunks) }),
        );
        answer.on('error', reject);
      })
      .on('error', reject)
      .end();
  });
}

export function decoded(received: Received): string {
  const encoding = received.headers['content-encoding'];
  const bytes =
    encoding === 'br'
      ? zlib.brotliDecompressSync(received.body)
      : encoding === 'gzip'
        ? zlib.gunzipSync(received.body)
        : received.body;
  return bytes.toString();
}

/**
 * The most live memory (the heap after a full collection, and the buffers outside it) grew above what
 * it was before the request, sampled every mebibyte received of `path`'s answer and every 100 ms from
 * the request on (while an answer is made before its first byte, too), and how many bytes came.
 */
export async function liveHeapWhileReceiving(
  port: number,
  path: string,
  headers: Record<string, string>,
): Promise<{ peak: number; received: number }> {
  v8.setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as () => void;
  const liveMemory = () => {
    gc();
    return v8.getHeapStatistics().used_heap_size + process.memoryUsage().arrayBuffers;
  };
  const baseline = liveMemory();
  let peak = 0;
  let received = 0;
  const sample = () => {
    peak = Math.max(peak, liveMemory() - baseline);
  };
  const timer = setInterval(sample, 100);
  try {
    await new Promise<void>((resolve, reject) => {
      http
        .get({ host: '127.0.0.1', port, path, headers }, (answer) => {
          let sinceSample = 0;
          answer.on('data', (chunk: Buffer) => {
            received += chunk.length;
            sinceSample += chunk.length;
            if (sinceSample >= 1024 * 1024) {
              sinceSample = 0;
              sample();
            }
          });
          answer.on('end', resolve);
          answer.on('error', reject);
        })
        .on('error', reject);
    });
  } finally {
    clearInterval(timer);
  }
  sample();
  return { peak, received };
}

/** Reads `path` until more than `bytes` came, then goes away. */
export function readThenGoAway(
  port: number,
  path: string,
  headers: Record<string, string>,
  bytes: number,
): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const request = http.get({ host: '127.0.0.1', port, path, headers }, (answer) => {
      let received = 0;
      answer.on('data', (chunk: Buffer) => {
        received += chunk.length;
        if (received > bytes) {
          request.destroy();
          resolve();
        }
      });
    });
    request.on('error', (error) => {
      if (!request.destroyed) reject(error);
    });
  });
}

/** Read sides listening on a port, over one counting connection, closed together. */
export class StreamedReads {
  readonly counted = { pinReads: 0 };
  readonly reader: Db;
  private readonly opened: FastifyInstance[] = [];

  constructor(private readonly backend: TestBackend) {
    this.reader = countingDb(backend, this.counted);
  }

  /**
   * The read side with an answer budget of `answerCacheBytes` (64 MiB by default), listening, with
   * the app's default timeouts unless given.
   */
  async serve(
    answerCacheBytes?: number,
    timeouts?: { readonly requestMs: number; readonly keepAliveMs: number },
  ): Promise<{ app: FastifyInstance; reads: ReadSide; port: number }> {
    const reads = await readSide(
      this.reader,
      this.backend.content,
      answerCacheBytes === undefined ? {} : { answerCacheBytes },
    );
    const app = await buildApp({
      reads: reads.answers,
      authenticator: new AccountAuthenticator(),
      rateLimits: unlimited,
      readiness: [],
      ...(timeouts === undefined ? {} : { timeouts }),
    });
    app.addHook('onClose', async () => reads.close());
    await app.listen({ port: 0, host: '127.0.0.1' });
    this.opened.push(app);
    return { app, reads, port: (app.server.address() as AddressInfo).port };
  }

  async close(): Promise<void> {
    for (const app of this.opened) await app.close();
    await this.reader.destroy();
  }
}

/**
 * Asks for `path` on a connection of its own and takes nothing after the first bytes: the answer
 * fills what the sockets buffer, then waits. `readRest` takes what is left until the connection
 * closes (a socket that reads nothing cannot see it close) and resolves with every byte received.
 */
export function askThenStopReading(
  port: number,
  path: string,
  headers: Record<string, string>,
): { readRest(): Promise<number>; stop(): void } {
  const socket = net.connect(port, '127.0.0.1');
  const lines = Object.entries(headers).map(([name, value]) => `${name}: ${value}\r\n`);
  // Closed by the server once answered, cut short or not: `readRest` never waits on keep-alive.
  socket.write(`GET ${path} HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n${lines.join('')}\r\n`);
  let received = 0;
  socket.on('data', (chunk: Buffer) => {
    received += chunk.length;
  });
  socket.once('data', () => socket.pause());
  socket.on('error', () => {});
  const closed = new Promise<number>((resolve) => socket.once('close', () => resolve(received)));
  return {
    readRest: () => {
      socket.resume();
      return closed;
    },
    stop: () => socket.destroy(),
  };
}
