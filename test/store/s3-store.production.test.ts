import http from 'node:http';
import net from 'node:net';
import { CreateBucketCommand, GetObjectCommand } from '@aws-sdk/client-s3';
import type { FastifyInstance } from 'fastify';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AnswerCache } from '../../src/answers/answer-cache.js';
import { ReadAnswers } from '../../src/answers/read-answers.js';
import { PlaybookService } from '../../src/catalog/playbook-service.js';
import { buildApp } from '../../src/composition/app.js';
import { ContentReader } from '../../src/content/content-reader.js';
import { DatabaseContentStore } from '../../src/content/database-store.js';
import { sha256Hex } from '../../src/content/hash.js';
import { S3ContentStore, type S3ContentStoreOptions } from '../../src/content/s3-store.js';
import { UnavailableError } from '../../src/foundation/errors.js';
import { unlimited } from '../helpers/app.js';
import {
  createTestBackend,
  removeBucket,
  s3AdminClient,
  s3AdminClientFor,
  type TestBackend,
} from '../helpers/backend.js';
import { freePort, type S3Server, startS3 } from '../helpers/servers.js';
import { anyReader, seedCatalog, seedResource, timedGet } from './support.js';

/**
 * The S3 content store against a real S3-protocol server, and against the ways a store fails: nothing
 * listening, a peer that never answers, errors from the store. Every failure that means "out of reach"
 * must be an UnavailableError (answered 503) within a few seconds, never a hang.
 */

const credentials = { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' };
const storeAt = (endpoint: string, extra: Partial<S3ContentStoreOptions> = {}) =>
  new S3ContentStore({
    bucket: 'unreachable',
    prefix: 'p',
    endpoint,
    client: { region: 'us-east-1', credentials },
    ...extra,
  });

async function failureOf(promise: Promise<unknown>): Promise<{ error: unknown; ms: number }> {
  const started = performance.now();
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  return { error, ms: performance.now() - started };
}

const servers: { close(): void }[] = [];
afterAll(() => {
  for (const server of servers) server.close();
});

async function listen(server: net.Server | http.Server): Promise<number> {
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return (server.address() as net.AddressInfo).port;
}

describe('S3ContentStore on the S3 test server', () => {
  let backend: TestBackend;
  beforeAll(async () => {
    backend = await createTestBackend();
  });
  afterAll(async () => {
    await backend?.cleanup();
  });

  it('writes the object at its content-addressed key, as the UTF-8 bytes of the content', async () => {
    const store = backend.objectStore as S3ContentStore;
    const text = 'stored where its key says: Grüße';
    const hash = sha256Hex(text);
    await store.put(hash, text);
    const env = backend.env;
    const admin = s3AdminClientFor(backend);
    try {
      const bucket = new URL(env.PLAYBOOK_CONTENT_STORE!).host;
      expect(store.keyOf(hash)).toBe(`content/sha256/${hash.slice(0, 2)}/${hash}`);
      const object = await admin.send(new GetObjectCommand({ Bucket: bucket, Key: store.keyOf(hash) }));
      const bytes = Buffer.from(await object.Body!.transformToByteArray());
      expect(bytes.equals(Buffer.from(text, 'utf8'))).toBe(true);
    } finally {
      admin.destroy();
    }
  });
});

describe('S3ContentStore when the store is out of reach', () => {
  it('fails fast with UnavailableError when nothing listens', async () => {
    const store = storeAt(`http://127.0.0.1:${await freePort()}`);
    const hash = sha256Hex('x');
    for (const attempt of [() => store.get(hash), () => store.put(hash, 'x'), () => store.check()]) {
      const { error, ms } = await failureOf(attempt());
      expect(error).toBeInstanceOf(UnavailableError);
      expect(ms).toBeLessThan(3000);
    }
    store.close();
  });

  it('gives up on a peer that accepts and never answers within the default read deadline', async () => {
    const port = await listen(net.createServer(() => {}));
    const store = storeAt(`http://127.0.0.1:${port}`);
    const hash = sha256Hex('x');
    // With the service's own defaults: this is the bound a request meets in production.
    const results = await Promise.all([failureOf(store.get(hash)), failureOf(store.check())]);
    for (const { error, ms } of results) {
      expect(error).toBeInstanceOf(UnavailableError);
      expect(ms).toBeLessThan(6000);
    }
    store.close();
  }, 20_000);

  it('treats 5xx and 429 as unavailable, after its retries, and 403 as a fault of the deployment', async () => {
    let status = 503;
    let requests = 0;
    const port = await listen(
      http.createServer((request, response) => {
        requests++;
        request.resume();
        response.writeHead(status, { 'content-type': 'application/xml' });
        response.end(`<?xml version="1.0"?><Error><Code>E${status}</Code><Message>m</Message></Error>`);
      }),
    );
    const store = storeAt(`http://127.0.0.1:${port}`, { timeouts: { maxAttempts: 2 } });
    const hash = sha256Hex('x');
    for (const code of [503, 500, 429]) {
      status = code;
      requests = 0;
      const { error } = await failureOf(store.get(hash));
      expect(error, String(code)).toBeInstanceOf(UnavailableError);
      expect(requests, 'retried once').toBe(2);
    }
    status = 403;
    const { error } = await failureOf(store.get(hash));
    expect(error).not.toBeInstanceOf(UnavailableError);
    expect((error as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode).toBe(403);
    store.close();
  });
});

describe('an S3 outage under HTTP', () => {
  let backend: TestBackend;
  let s3: S3Server;
  let store: S3ContentStore;
  let app: FastifyInstance;
  let base: string;
  const resourceIds: string[] = [];
  const bucket = 'outage-test';

  beforeAll(async () => {
    backend = await createTestBackend();
    // A server of this test's own, so that stopping it disturbs no other suite.
    s3 = await startS3();
    const admin = s3AdminClient(s3);
    await admin.send(new CreateBucketCommand({ Bucket: bucket }));
    admin.destroy();
    store = new S3ContentStore({
      bucket,
      prefix: 'content',
      endpoint: s3.endpoint,
      client: { region: s3.region, credentials },
    });
    const db = backend.databases.primary;
    const catalogId = await seedCatalog(db, 'handbook');
    for (let i = 0; i < 3; i++) {
      resourceIds.push(
        await seedResource(db, catalogId, store, `large-${i}`, `# Large ${i}\n${'x'.repeat(70_000)}`),
      );
    }
    const reader = backend.databases.reader;
    app = await buildApp({
      reads: new ReadAnswers(
        new PlaybookService(reader, new ContentReader([new DatabaseContentStore(reader), store])),
        new AnswerCache(64 * 1024 * 1024),
      ),
      authenticator: anyReader,
      rateLimits: unlimited,
      readiness: [
        {
          name: 'database',
          check: async () => void (await sql`select 1`.execute(backend.databases.primary)),
        },
        { name: 'contentStore', check: () => store.check() },
      ],
    });
    base = await app.listen({ port: 0, host: '127.0.0.1' });
  }, 60_000);

  afterAll(async () => {
    await app?.close();
    store?.close();
    if (s3) {
      await s3.start().catch(() => {});
      const admin = s3AdminClient(s3);
      await removeBucket(admin, bucket).catch(() => {});
      admin.destroy();
      await s3.destroy();
    }
    await backend?.cleanup();
  });

  it('answers content reads 503 while S3 is down, stays ready (degraded) as it serves lists, fails the strict check, and recovers without a restart', async () => {
    const [first, second, third] = resourceIds.map((id) => `/v3/playbook/resources/${id}`);
    expect((await timedGet(base, first!)).status).toBe(200);
    expect((await timedGet(base, '/readyz')).status).toBe(200);

    await s3.stop();
    const detail = await timedGet(base, second!);
    expect(detail.status, detail.body).toBe(503);
    expect(detail.contentType).toMatch(/^application\/problem\+json/);
    expect(JSON.parse(detail.body)).toMatchObject({ status: 503, code: 'unavailable' });
    expect(detail.body).not.toMatch(/127\.0\.0\.1|sha256|content\/|outage-test/);
    expect(detail.ms).toBeLessThan(6000);
    // D31: a shared dependency down takes no instance out by itself (lists and content kept in the
    // database are still served); the strict form fails on it.
    const ready = await timedGet(base, '/readyz');
    expect(ready.status).toBe(200);
    expect(JSON.parse(ready.body)).toMatchObject({
      status: 'degraded',
      checks: { database: 'ok', contentStore: 'unavailable' },
    });
    expect((await timedGet(base, '/readyz?strict=true')).status).toBe(503);
    // An answer kept in memory is still served: nothing can change it while the store is down.
    expect((await timedGet(base, first!)).status).toBe(200);
    // Lists never load content.
    expect((await timedGet(base, '/v3/playbook/catalogs/svc/handbook/resources')).status).toBe(200);

    await s3.start();
    expect((await timedGet(base, second!)).status).toBe(200);
    expect((await timedGet(base, third!)).status).toBe(200);
    expect((await timedGet(base, '/readyz')).status).toBe(200);
  }, 60_000);
});
