import net from 'node:net';
import { performance } from 'node:perf_hooks';
import { Writable } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REDACTED_PATHS } from '../../src/http/access-log.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { givenCatalog, givenResource } from '../helpers/fixtures.js';
import { type RawAnswer, rawExchange } from '../helpers/raw-http.js';
import { sleep } from '../helpers/wait.js';

/**
 * Regression tests for what an outside review found by attacking the running service (issue 8): each
 * defect named, on both stacks, through the real HTTP server where the defect lived below Fastify.
 */

class LogCapture extends Writable {
  readonly lines: string[] = [];
  override _write(chunk: Buffer, _encoding: string, done: () => void): void {
    this.lines.push(chunk.toString('utf8'));
    done();
  }
}

describe('defects of the outside review (issue 8)', () => {
  let backend: TestBackend;
  let identity: TestIdentity;
  let app: FastifyInstance;
  let port: number;
  const logs = new LogCapture();
  let key: string;
  let token: string;
  let resourceId: string;

  beforeAll(async () => {
    backend = await createTestBackend();
    const logger = pino({ level: 'info', redact: { paths: REDACTED_PATHS, censor: '[redacted]' } }, logs);
    identity = createTestIdentity(backend, { logger });
    app = await buildIdentityApp(backend, identity, logger);
    await app.listen({ port: 0, host: '127.0.0.1' });
    port = (app.server.address() as net.AddressInfo).port;
    const catalog = await givenCatalog(backend.databases.primary, { slug: 'handbook' });
    resourceId = (await givenResource(backend, catalog, { slug: 'onboarding' })).id;
    key = (await identity.mintKey({ accountId: 'acme' })).key;
    token = await identity.mintToken({ user: 'ada', accounts: ['acme'] });
  });
  afterAll(async () => {
    await app?.close();
    await identity?.close();
    await backend?.cleanup();
  });

  const get = (path: string, headers: string[]) =>
    rawExchange(
      port,
      `GET ${path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n${headers.map((h) => `${h}\r\n`).join('')}\r\n`,
    );

  describe('#1 HEAD with a matching If-None-Match', () => {
    it('answers 304 on every read and the key list, never 500', async () => {
      const urls = [
        '/v3/playbook/catalogs',
        '/v3/playbook/catalogs/svc/handbook/resources',
        `/v3/playbook/resources/${resourceId}`,
        `/v3/playbook/resources/${resourceId}/versions`,
        '/v3/identity/api-keys?accountId=acme',
      ];
      for (const url of urls) {
        const credential = url.startsWith('/v3/identity')
          ? `Authorization: Bearer ${token}`
          : `x-api-key: ${key}`;
        const full = await get(url, [credential]);
        expect(full.status, url).toBe(200);
        const head = await rawExchange(
          port,
          `HEAD ${url} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n${credential}\r\nIf-None-Match: ${full.headers.etag}\r\n\r\n`,
        );
        expect(head.status, url).toBe(304);
        expect(head.headers.etag, url).toBe(full.headers.etag);
        expect(head.headers['content-length'], url).toBeUndefined();
      }
    });
  });

  describe('#5 and D21: credentials in the query string', () => {
    it.each(['api_key', 'apiKey', 'x-api-key', 'key', 'token', 'access_token', 'TOKEN'])(
      'refuses ?%s= with 400 "send credentials in headers", and never logs its value',
      async (name) => {
        const secret = `leaked${name.length}value`;
        const answer = await get(`/v3/playbook/catalogs?${name}=${secret}`, [`x-api-key: ${key}`]);
        expect(answer.status).toBe(400);
        expect(answer.headers['content-type']).toMatch(/^application\/problem\+json/);
        const problem = JSON.parse(answer.body);
        expect(problem.errors).toEqual([
          { in: 'query', name, message: expect.stringMatching(/^send credentials in headers/) },
        ]);
        expect(answer.body).not.toContain(secret);
        expect(logs.lines.join('')).not.toContain(secret);
      },
    );
  });

  describe('#8 and D21: a credential header sent twice', () => {
    it.each([
      ['Authorization', (value: string) => [`Authorization: Bearer ${value}`, 'Authorization: Bearer junk']],
      ['x-api-key', (_value: string) => [`x-api-key: ${key}`, `x-api-key: ${key}`]],
    ])('refuses two %s headers with 400 naming the header', async (name, headers) => {
      const answer = await get('/v3/playbook/catalogs', headers(token));
      expect(answer.status).toBe(400);
      expect(JSON.parse(answer.body).errors).toEqual([
        { in: 'header', name: name.toLowerCase(), message: 'must be sent once' },
      ]);
    });

    it('refuses two x-api-key headers while the key is held in memory too', async () => {
      // The first request leaves the key verified and cached; the second may not ride on it.
      expect((await get('/v3/playbook/catalogs', [`x-api-key: ${key}`])).status).toBe(200);
      const answer = await get('/v3/playbook/catalogs', [`x-api-key: ${key}`, `x-api-key: ${key}`]);
      expect(answer.status).toBe(400);
      expect(JSON.parse(answer.body).errors).toEqual([
        { in: 'header', name: 'x-api-key', message: 'must be sent once' },
      ]);
    });

    it('accepts each of them sent once', async () => {
      expect((await get('/v3/playbook/catalogs', [`Authorization: Bearer ${token}`])).status).toBe(200);
      expect((await get('/v3/playbook/catalogs', [`x-api-key: ${key}`])).status).toBe(200);
    });
  });

  describe('#2 and D2: errors of the HTTP parser, CONNECT, and methods a path does not take', () => {
    function expectRawProblem(answer: RawAnswer, status: number, code: string) {
      expect(answer.status).toBe(status);
      expect(answer.headers['content-type']).toMatch(/^application\/problem\+json/);
      expect(answer.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
      const problem = JSON.parse(answer.body);
      expect(problem).toMatchObject({ status, code, requestId: answer.headers['x-request-id'] });
      expect(answer.closed).toBe(true);
    }

    it('answers a malformed request line with a 400 problem document and closes', async () => {
      expectRawProblem(await rawExchange(port, 'THIS IS NOT HTTP\r\n\r\n'), 400, 'invalid_request');
      expectRawProblem(
        await rawExchange(port, 'GET /v3/playbook/catalogs HTTP/9.9\r\n\r\n'),
        400,
        'invalid_request',
      );
    });

    it('answers headers over 16 KiB with a 431 problem document and closes', async () => {
      const answer = await rawExchange(
        port,
        `GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`,
      );
      expectRawProblem(answer, 431, 'headers_too_large');
    });

    it('answers CONNECT with a 501 problem document and closes', async () => {
      expectRawProblem(
        await rawExchange(port, 'CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n'),
        501,
        'not_implemented',
      );
    });

    it('answers an HTTP/1.1 request without Host 400 naming the header, and an Expect it cannot meet 417', async () => {
      const hostless = await rawExchange(port, 'GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n');
      expectRawProblem(hostless, 400, 'invalid_request');
      expect(JSON.parse(hostless.body).errors).toEqual([
        { in: 'header', name: 'host', message: 'is required in HTTP/1.1' },
      ]);
      // HTTP/1.0 has no Host requirement.
      expect((await rawExchange(port, 'GET /healthz HTTP/1.0\r\n\r\n')).status).toBe(200);
      expectRawProblem(
        await rawExchange(port, 'GET /healthz HTTP/1.1\r\nHost: x\r\nExpect: something-else\r\n\r\n'),
        417,
        'expectation_failed',
      );
    });

    it('answers a known path asked with another method 405, naming its methods in Allow', async () => {
      for (const [method, url, allow] of [
        ['DELETE', '/v3/playbook/catalogs', 'GET, HEAD'],
        ['POST', `/v3/playbook/resources/${resourceId}`, 'GET, HEAD'],
        ['PUT', '/v3/identity/api-keys', 'GET, HEAD, POST'],
        ['PUT', '/v3/identity/api-keys/abcdefghijkl', 'GET, HEAD, DELETE, PATCH'],
      ] as const) {
        const answer = await app.inject({ method, url, headers: { 'x-api-key': key } });
        expect(answer.statusCode, `${method} ${url}`).toBe(405);
        expect(answer.headers.allow, `${method} ${url}`).toBe(allow);
        expect(answer.json()).toMatchObject({ status: 405, code: 'method_not_allowed' });
        expect(answer.headers['x-request-id']).toBeTruthy();
      }
      expect((await app.inject({ method: 'GET', url: '/v3/nothing' })).statusCode).toBe(404);
    });
  });

  describe('D2: HTTP desync forms are refused, the connection closed, and nothing smuggled', () => {
    /** A request the server must never see: it would answer it after the refusal on the same socket. */
    const smuggled = () => `GET /v3/playbook/catalogs HTTP/1.1\r\nHost: x\r\nx-api-key: ${key}\r\n\r\n`;
    // Authenticated, so that the body is read rather than refused unread.
    const post = () =>
      `POST /v3/identity/api-keys HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token}\r\nContent-Type: application/json\r\n`;
    const forms: [string, () => string][] = [
      [
        'Content-Length and Transfer-Encoding',
        () => `${post()}Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n${smuggled()}`,
      ],
      [
        'Transfer-Encoding and then Content-Length',
        () => `${post()}Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n${smuggled()}`,
      ],
      [
        'two Content-Lengths that differ',
        () => `${post()}Content-Length: 0\r\nContent-Length: ${smuggled().length}\r\n\r\n${smuggled()}`,
      ],
      [
        'two equal Content-Lengths',
        () => `${post()}Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}${smuggled()}`,
      ],
      ['a list of Content-Lengths', () => `${post()}Content-Length: 2, 2\r\n\r\n{}${smuggled()}`],
      [
        'an obs-fold header',
        () => `GET /healthz HTTP/1.1\r\nHost: x\r\nX-Folded: a\r\n  b\r\n\r\n${smuggled()}`,
      ],
      [
        'an obs-fold Transfer-Encoding',
        () => `${post()}Content-Length: 2\r\nTransfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n${smuggled()}`,
      ],
      ['bare LF line endings', () => `GET /healthz HTTP/1.1\nHost: x\n\n${smuggled()}`],
      ['a bare LF between headers', () => `GET /healthz HTTP/1.1\r\nHost: x\nX-A: b\r\n\r\n${smuggled()}`],
      [
        'a chunk size that is not hexadecimal',
        () => `${post()}Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n${smuggled()}`,
      ],
      [
        'a chunk size that overflows',
        () => `${post()}Transfer-Encoding: chunked\r\n\r\n${'f'.repeat(20)}\r\n{}\r\n0\r\n\r\n${smuggled()}`,
      ],
      [
        'a negative chunk size',
        () => `${post()}Transfer-Encoding: chunked\r\n\r\n-2\r\n{}\r\n0\r\n\r\n${smuggled()}`,
      ],
      [
        'a chunk longer than its size',
        () => `${post()}Transfer-Encoding: chunked\r\n\r\n1\r\n{}\r\n0\r\n\r\n${smuggled()}`,
      ],
      [
        'a Transfer-Encoding that does not end in chunked',
        () => `${post()}Transfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n${smuggled()}`,
      ],
    ];

    it.each(forms)('refuses %s with a 400 and closes, answering nothing after it', async (_form, text) => {
      const answer = await rawExchange(port, text());
      expect(answer.status, answer.body).toBe(400);
      expect(answer.headers['content-type']).toMatch(/^application\/problem\+json/);
      expect(JSON.parse(answer.body.split('\r\n\r\n')[0]!)).toMatchObject({ status: 400 });
      expect(answer.closed).toBe(true);
      // One answer on the socket: the request behind the refused one was never read as a request.
      expect(answer.body).not.toMatch(/HTTP\/1\.[01] \d{3} /);
    });
  });
});

describe('#6, #9 and D20, D21: input hygiene and bounded answers', () => {
  let backend: TestBackend;
  let identity: TestIdentity;
  let app: FastifyInstance;
  let bearer: Record<string, string>;
  let reader: Record<string, string>;

  beforeAll(async () => {
    backend = await createTestBackend();
    identity = createTestIdentity(backend);
    app = await buildIdentityApp(backend, identity);
    bearer = await identity.tokenHeaders({ accounts: ['acme'] });
    reader = (await identity.mintKey({ accountId: 'acme' })).headers;
  });
  afterAll(async () => {
    await app?.close();
    await identity?.close();
    await backend?.cleanup();
  });

  const createKey = (payload: string | object) =>
    app.inject({
      method: 'POST',
      url: '/v3/identity/api-keys',
      headers: { ...bearer, 'content-type': 'application/json' },
      payload: typeof payload === 'string' || Buffer.isBuffer(payload) ? payload : JSON.stringify(payload),
    });
  const valid = { name: 'deploy', accountId: 'acme', scopes: ['playbook:read'] };

  it.each([
    ['ESC', 'deploy\u001b[2J'],
    ['NUL', 'deploy\u0000'],
    ['a right-to-left override', 'deploy\u202egnp.exe'],
    ['a line break', 'two\nlines'],
    ['DEL', 'deploy\u007f'],
  ])('refuses a key name holding %s, naming the field', async (_what, name) => {
    const answer = await createKey({ ...valid, name });
    expect(answer.statusCode).toBe(400);
    expect(answer.json().errors).toEqual([
      { in: 'body', name: 'name', message: expect.stringMatching(/^must be one line of text/) },
    ]);
  });

  it('accepts a name in any script, with punctuation and spaces', async () => {
    expect((await createKey({ ...valid, name: 'Déploiement — 配置 (prod) #2' })).statusCode).toBe(201);
  });

  it('refuses a body that is not UTF-8, rather than storing replacement characters', async () => {
    const body = Buffer.concat([
      Buffer.from('{"name":"dep'),
      Buffer.from([0xff, 0xfe]),
      Buffer.from('loy","accountId":"acme","scopes":["playbook:read"]}'),
    ]);
    const answer = await createKey(body);
    expect(answer.statusCode).toBe(400);
    expect(answer.json().errors).toEqual([{ in: 'body', name: '(body)', message: 'must be UTF-8' }]);
    const list = await app.inject({ url: '/v3/identity/api-keys?accountId=acme', headers: bearer });
    expect(list.body).not.toContain('\ufffd');
  });

  it.each(['constructor', 'toString', '__proto__', 'hasOwnProperty'])(
    'names a body field called %s as an unknown field, not through the prototype chain',
    async (field) => {
      const answer = await createKey(
        `{"name":"x","accountId":"acme","scopes":["playbook:read"],"${field}":1}`,
      );
      expect(answer.statusCode).toBe(400);
      expect(answer.json().errors).toEqual([
        {
          in: 'body',
          name: field,
          message: 'is not a known field (known: name, accountId, scopes, expiresAt, restrictions)',
        },
      ]);
    },
  );

  it('refuses a body field of the wrong type without coercing it', async () => {
    const answer = await createKey({ ...valid, name: 7, scopes: 'playbook:read' });
    expect(answer.statusCode).toBe(400);
    expect(answer.json().errors).toEqual(
      expect.arrayContaining([
        { in: 'body', name: 'name', message: 'must be a string' },
        { in: 'body', name: 'scopes', message: 'must be an array' },
      ]),
    );
  });

  it('D2: lists every problem of a query, those found before validation and after', async () => {
    const answer = await app.inject({
      url: '/v3/playbook/catalogs?foo=1&pageSize=500&page=1e2',
      headers: reader,
    });
    expect(answer.statusCode).toBe(400);
    expect(
      answer
        .json()
        .errors.map((e: { name: string }) => e.name)
        .sort(),
    ).toEqual(['foo', 'page', 'pageSize']);
  });

  it('#9: thousands of commas in a filter give one small problem, not a megabyte', async () => {
    const answer = await app.inject({
      url: `/v3/playbook/catalogs/svc/x/resources?kind=${','.repeat(7000)}`,
      headers: reader,
    });
    expect(answer.statusCode).toBe(400);
    expect(answer.json().errors).toHaveLength(1);
    expect(answer.rawPayload.length).toBeLessThan(1024);
  });

  it('D20: a 400 lists at most 20 problems, then says how many more', async () => {
    const extra = Object.fromEntries(Array.from({ length: 25 }, (_, i) => [`unknown${i}`, i]));
    const answer = await createKey({ ...valid, ...extra });
    expect(answer.statusCode).toBe(400);
    const problem = answer.json();
    expect(problem.errors).toHaveLength(20);
    expect(problem.detail).toBe('The request is invalid. 5 more problems are not listed.');
  });
});

describe('#4 and D20: requests that arrive too slowly', () => {
  let backend: TestBackend;
  let identity: TestIdentity;
  let app: FastifyInstance;
  let port: number;

  beforeAll(async () => {
    backend = await createTestBackend();
    identity = createTestIdentity(backend, { env: { PLAYBOOK_REQUEST_TIMEOUT_MS: '1000' } });
    app = await buildIdentityApp(backend, identity);
    await app.listen({ port: 0, host: '127.0.0.1' });
    port = (app.server.address() as net.AddressInfo).port;
  });
  afterAll(async () => {
    await app?.close();
    await identity?.close();
    await backend?.cleanup();
  });

  it('closes a request whose body trickles in: 408 once authenticated, at once when not', async () => {
    const token = await identity.mintToken({ accounts: ['acme'] });
    const started = performance.now();
    const slow = await Promise.all(
      [true, true, false, false].map(async (authenticated) => {
        const socket = net.connect(port, '127.0.0.1');
        await new Promise((resolve) => socket.once('connect', resolve));
        const received: Buffer[] = [];
        socket.on('data', (chunk: Buffer) => received.push(chunk));
        socket.on('error', () => {});
        const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
        const credential = authenticated ? `Authorization: Bearer ${token}\r\n` : '';
        socket.write(
          `POST /v3/identity/api-keys HTTP/1.1\r\nHost: x\r\n${credential}Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{`,
        );
        const trickle = setInterval(() => socket.write(' '), 300);
        await Promise.race([closed, sleep(10_000)]);
        clearInterval(trickle);
        socket.destroy();
        return { authenticated, text: Buffer.concat(received).toString('utf8') };
      }),
    );
    for (const { authenticated, text } of slow) {
      if (authenticated) {
        expect(text).toMatch(/^HTTP\/1\.1 408 /);
        expect(text).toMatch(/"code":"request_timeout"/);
      } else {
        expect(text).toMatch(/^HTTP\/1\.1 401 /);
      }
    }
    // Closed within the request timeout and Node's one-second check, not minutes later.
    expect(performance.now() - started).toBeLessThan(4000);
  });
});
