import net from 'node:net';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../../src/composition/app.js';
import { UnavailableError } from '../../src/foundation/errors.js';
import { listenLocally, unlimited } from '../helpers/app.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { checkProblem, problemOf } from '../helpers/contract.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { givenAccount } from '../helpers/fixtures.js';
import { publishedResource } from '../helpers/publish-bodies.js';
import { rawExchange } from '../helpers/raw-http.js';
import { readSide } from '../helpers/read-side.js';

/**
 * D29 (amending D2): HTTP's own statuses where HTTP defines the case. 415 for a body that is not
 * JSON, 413 for one over the limit (decided before it is read), 406 for an Accept that rules JSON out,
 * Retry-After on every 503, WWW-Authenticate on every 401, and problem types that are docs pages.
 */

const KEYS = '/v3/identity/api-keys';
const CATALOG = '/v3/playbook/catalogs/org/statuses';
const PUBLISH_LIMIT = 8192;

describe("HTTP's own statuses (D29)", () => {
  let backend: TestBackend;
  let identity: TestIdentity;
  let app: FastifyInstance;
  let port: number;
  let writer: Record<string, string>;
  let writerKey: string;
  let ada: Record<string, string>;

  beforeAll(async () => {
    backend = await createTestBackend();
    identity = createTestIdentity(backend, { env: { PLAYBOOK_MAX_PUBLISH_BYTES: String(PUBLISH_LIMIT) } });
    app = await buildIdentityApp(backend, identity);
    port = Number(new URL(await listenLocally(app)).port);
    await givenAccount(backend.databases.primary, 'acme');
    const minted = await identity.mintKey({ accountId: 'acme', scopes: ['playbook:read', 'playbook:write'] });
    writer = minted.headers;
    writerKey = minted.key;
    ada = await identity.tokenHeaders({ user: 'ada', accounts: ['acme'] });
  });
  afterAll(async () => {
    await app.close();
    await identity.close();
    await backend.cleanup();
  });

  const keyBody = JSON.stringify({ name: 'ci', accountId: 'acme', scopes: ['playbook:read'] });
  const keyCount = async () =>
    (await app.inject({ url: `${KEYS}?accountId=acme&pageSize=100`, headers: ada })).json().meta.total;

  describe('415 unsupported_media_type: a body that is not JSON', () => {
    it.each([
      ['text/plain', keyBody],
      ['application/xml', '<key name="x"/>'],
      ['application/x-www-form-urlencoded', 'name=x&accountId=acme'],
      ['multipart/form-data; boundary=x', '--x\r\n\r\nname\r\n--x--'],
      ['application/json; charset=latin1', keyBody],
      ['application/jsonx', keyBody],
      ['not a media type', keyBody],
    ])('POST %s: 415, nothing created', async (contentType, payload) => {
      const before = await keyCount();
      const answer = await app.inject({
        method: 'POST',
        url: KEYS,
        headers: { ...ada, 'content-type': contentType },
        payload,
      });
      expect(checkProblem(answer, 415, 'unsupported_media_type'), answer.body).toEqual([]);
      expect(problemOf(answer).detail).toMatch(/application\/json/);
      expect(await keyCount()).toBe(before);
    });

    it('a body without Content-Type is 415; the same body as application/json (any case, utf-8) is taken', async () => {
      const bare = await rawExchange(
        port,
        `POST ${KEYS} HTTP/1.1\r\nHost: x\r\nAuthorization: ${ada.authorization}\r\nContent-Length: ${keyBody.length}\r\nConnection: close\r\n\r\n${keyBody}`,
      );
      expect(bare.status).toBe(415);
      expect(JSON.parse(bare.body)).toMatchObject({ code: 'unsupported_media_type' });
      for (const contentType of ['application/json', 'Application/JSON; charset=UTF-8']) {
        const answer = await app.inject({
          method: 'POST',
          url: KEYS,
          headers: { ...ada, 'content-type': contentType },
          payload: keyBody,
        });
        expect(answer.statusCode, contentType).toBe(201);
      }
    });

    it('a content-coded body is 415 (the service decodes none); identity is no coding', async () => {
      const coded = await app.inject({
        method: 'POST',
        url: KEYS,
        headers: { ...ada, 'content-type': 'application/json', 'content-encoding': 'gzip' },
        payload: keyBody,
      });
      expect(checkProblem(coded, 415, 'unsupported_media_type'), coded.body).toEqual([]);
      const plain = await app.inject({
        method: 'POST',
        url: KEYS,
        headers: { ...ada, 'content-type': 'application/json', 'content-encoding': 'identity' },
        payload: keyBody,
      });
      expect(plain.statusCode).toBe(201);
    });

    it('a publishing PUT with a text body is 415 and writes nothing', async () => {
      const body = JSON.stringify({ name: 'S', version: '1', resources: [publishedResource('a')] });
      const answer = await app.inject({
        method: 'PUT',
        url: CATALOG,
        headers: { ...writer, 'content-type': 'text/plain' },
        payload: body,
      });
      expect(checkProblem(answer, 415, 'unsupported_media_type'), answer.body).toEqual([]);
      expect((await app.inject({ url: `${CATALOG}/resources`, headers: writer })).statusCode).toBe(404);
    });
  });

  describe('413 content_too_large', () => {
    /** Opens a connection, sends `head` and `body`, and reads until the server answers and closes. */
    async function sendAndWatch(head: string, body: Buffer | string, keepSending = false) {
      const socket = net.connect(port, '127.0.0.1');
      await new Promise<void>((resolve, reject) => {
        socket.once('connect', resolve);
        socket.once('error', reject);
      });
      socket.on('error', () => {});
      const started = Date.now();
      let received = '';
      let sent = 0;
      socket.on('data', (chunk: Buffer) => {
        received += chunk.toString('utf8');
      });
      const closed = new Promise<number>((resolve) =>
        socket.once('close', () => resolve(Date.now() - started)),
      );
      socket.write(head);
      socket.write(body);
      sent += Buffer.byteLength(body);
      // A client that would go on sending: more of the body every few milliseconds, until closed.
      const feeder = keepSending
        ? setInterval(() => {
            if (socket.writable) {
              socket.write(Buffer.alloc(1024, 'a'));
              sent += 1024;
            }
          }, 5)
        : undefined;
      const elapsed = await Promise.race([closed, new Promise<number>((r) => setTimeout(() => r(-1), 5000))]);
      clearInterval(feeder);
      socket.destroy();
      return { elapsed, received, sent };
    }

    it('Content-Length of 10 GB: 413 at once, from the header alone, and the connection closed', async () => {
      const head =
        `PUT ${CATALOG} HTTP/1.1\r\nHost: x\r\nx-api-key: ${writerKey}\r\n` +
        'Content-Type: application/json\r\nContent-Length: 10737418240\r\n\r\n';
      const { elapsed, received } = await sendAndWatch(head, '{"name":', true);
      expect(elapsed, 'the server closed the connection').toBeGreaterThan(-1);
      expect(elapsed).toBeLessThan(2000);
      expect(received).toMatch(/^HTTP\/1\.1 413 /);
      expect(received.toLowerCase()).toContain('connection: close');
      const body = JSON.parse(received.slice(received.indexOf('\r\n\r\n') + 4));
      expect(body).toMatchObject({
        status: 413,
        code: 'content_too_large',
        type: '/docs/problems/content_too_large',
      });
    });

    it('a chunked body that passes the limit while it streams: 413 as it passes, the connection closed', async () => {
      const head =
        `PUT ${CATALOG} HTTP/1.1\r\nHost: x\r\nx-api-key: ${writerKey}\r\n` +
        'Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n';
      const chunk = (text: string) => `${text.length.toString(16)}\r\n${text}\r\n`;
      const over = chunk(`{"name":"${'x'.repeat(PUBLISH_LIMIT)}`);
      const { elapsed, received, sent } = await sendAndWatch(head, over);
      expect(elapsed).toBeGreaterThan(-1);
      expect(elapsed).toBeLessThan(2000);
      expect(sent).toBeLessThan(PUBLISH_LIMIT * 2);
      expect(received).toMatch(/^HTTP\/1\.1 413 /);
      expect(JSON.parse(received.slice(received.indexOf('\r\n\r\n') + 4))).toMatchObject({
        code: 'content_too_large',
      });
    });

    it("a body over an operation's own limit (64 KiB for a key), said in Content-Length: 413; at the limit it is read", async () => {
      const answer = await app.inject({
        method: 'POST',
        url: KEYS,
        headers: { ...ada, 'content-type': 'application/json' },
        payload: JSON.stringify({
          name: 'x',
          accountId: 'acme',
          scopes: ['playbook:read'],
          pad: 'p'.repeat(70_000),
        }),
      });
      expect(checkProblem(answer, 413, 'content_too_large'), answer.body).toEqual([]);
      const within = await app.inject({
        method: 'PUT',
        url: CATALOG,
        headers: { ...writer, 'content-type': 'application/json' },
        payload: JSON.stringify({ name: 'S', version: '1', resources: [publishedResource('a')] }),
      });
      expect(within.statusCode, within.body).toBe(201);
    });

    it('no credential: 401 before anything of the body, however large it says it is, and closed', async () => {
      const head = `PUT ${CATALOG} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 10737418240\r\n\r\n`;
      const { elapsed, received } = await sendAndWatch(head, '{', true);
      expect(elapsed).toBeGreaterThan(-1);
      expect(elapsed).toBeLessThan(2000);
      expect(received).toMatch(/^HTTP\/1\.1 401 /);
      expect(received.toLowerCase()).toContain(
        'www-authenticate: apikey realm="playbook", header="x-api-key"',
      );
    });
  });

  describe('406 not_acceptable: an Accept that rules JSON out', () => {
    it.each([
      'text/html',
      'application/xml, text/*',
      '*/*;q=0',
      'application/json;q=0, application/problem+json;q=0, text/html',
      'image/png, */*;q=0',
    ])('Accept: %s is 406 on a read and on a write', async (accept) => {
      const read = await app.inject({ url: '/v3/playbook/catalogs', headers: { ...writer, accept } });
      expect(checkProblem(read, 406, 'not_acceptable'), read.body).toEqual([]);
      expect(read.headers['content-type']).toMatch(/^application\/problem\+json/);
      const write = await app.inject({
        method: 'POST',
        url: KEYS,
        headers: { ...ada, accept, 'content-type': 'application/json' },
        payload: keyBody,
      });
      expect(write.statusCode).toBe(406);
    });

    it.each([
      undefined,
      '',
      '*/*',
      'application/*',
      'application/json',
      'application/problem+json',
      'application/json; charset=utf-8',
      'text/html, application/xhtml+xml, */*;q=0.8',
      'text/html;q=0.9, application/json;q=0.1',
      'APPLICATION/JSON',
    ])('Accept: %s is fine', async (accept) => {
      const headers = accept === undefined ? writer : { ...writer, accept };
      const read = await app.inject({ url: '/v3/playbook/catalogs', headers });
      expect(read.statusCode).toBe(200);
    });

    it('the pages for people at /docs weigh Accept themselves', async () => {
      for (const url of ['/docs', '/docs/static/index.html']) {
        const page = await app.inject({ url, headers: { accept: 'text/html' } });
        expect(page.statusCode, url).toBeLessThan(400);
      }
    });
  });

  describe('401 carries WWW-Authenticate: the credentials the operation takes', () => {
    it('a read takes an API key (named by its header) or a bearer token', async () => {
      for (const headers of [{}, { 'x-api-key': 'svc_sk_test_nothing' }]) {
        const answer = await app.inject({ url: '/v3/playbook/catalogs', headers });
        expect(checkProblem(answer, 401, 'unauthenticated'), answer.body).toEqual([]);
        expect(answer.headers['www-authenticate']).toEqual([
          'ApiKey realm="playbook", header="x-api-key"',
          'Bearer realm="playbook"',
        ]);
      }
    });

    it('key management takes a bearer token only: an API key there is a 401 that asks for one', async () => {
      const answer = await app.inject({ url: `${KEYS}?accountId=acme`, headers: writer });
      expect(checkProblem(answer, 401, 'unauthenticated'), answer.body).toEqual([]);
      expect(answer.headers['www-authenticate']).toBe('Bearer realm="playbook"');
    });
  });

  describe('503 carries Retry-After', () => {
    it('a backend out of reach: 503 unavailable with Retry-After', async () => {
      const side = await readSide(backend.databases.reader, backend.content, { answerCacheBytes: 0 });
      const broken = await buildApp({
        reads: side.answers,
        authenticator: identity.authenticator,
        rateLimits: unlimited,
        readiness: [],
      });
      // The read side's database refuses, as in an outage (the adapter turns it into this error).
      side.playbook.catalogsPage = () => Promise.reject(new UnavailableError('the database did not answer'));
      try {
        const answer = await broken.inject({ url: '/v3/playbook/catalogs', headers: writer });
        expect(checkProblem(answer, 503, 'unavailable'), answer.body).toEqual([]);
        expect(answer.headers['retry-after']).toBe('1');
      } finally {
        await broken.close();
        side.close();
      }
    });

    it('readiness that fails: 503 with Retry-After, though its body is no problem document', async () => {
      const side = await readSide(backend.databases.reader, backend.content, { answerCacheBytes: 0 });
      const probe = await buildApp({
        reads: side.answers,
        authenticator: identity.authenticator,
        rateLimits: unlimited,
        readiness: [
          {
            name: 'database',
            essential: true,
            check: async () => {
              throw new Error('down');
            },
          },
        ],
      });
      try {
        const answer = await probe.inject({ url: '/readyz' });
        expect(answer.statusCode).toBe(503);
        expect(answer.headers['retry-after']).toBe('1');
      } finally {
        await probe.close();
        side.close();
      }
    });
  });

  it('every problem type is the docs page of its code, relative to the request', async () => {
    const answer = await app.inject({ url: '/v3/playbook/resources/nope', headers: writer });
    expect(problemOf(answer)).toMatchObject({
      type: '/docs/problems/invalid_request',
      code: 'invalid_request',
    });
    expect(new URL(problemOf(answer).type, 'https://playbook.example/v3/playbook/resources/nope').href).toBe(
      'https://playbook.example/docs/problems/invalid_request',
    );
  });
});
