import http from 'node:http';
import type { AddressInfo } from 'node:net';
import fc from 'fast-check';
import ipaddr from 'ipaddr.js';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { isLoopbackUrl, Playbook, PlaybookError } from '../../clients/typescript/src/index.js';
import { generateApiKey } from '../../src/schemas/api-key-format.js';

/**
 * D14 and D24 amended: the client library sends its key or token over plain HTTP to a loopback host
 * only (by the URL's text, never resolved) unless told otherwise, and never follows a redirect with
 * it to another origin or to plain http.
 */

const apiKey = generateApiKey('test').key;
const accessToken = 'eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJhZGEifQ.c2lnbmF0dXJl';
/** Each kind of credential, named for the tests' titles (never printed). */
const CREDENTIALS = [
  ['an API key', { apiKey }],
  ['an access token', { accessToken }],
] as const;

/** What one server received: each request's method, path and headers. */
interface Received {
  readonly method: string;
  readonly url: string;
  readonly headers: http.IncomingHttpHeaders;
}

/** A server on 127.0.0.1 that keeps what it receives and answers with `answer`. */
async function recordingServer(
  answer: (request: http.IncomingMessage, response: http.ServerResponse) => void,
): Promise<{ origin: string; received: Received[]; close(): Promise<void> }> {
  const received: Received[] = [];
  const server = http.createServer((request, response) => {
    received.push({ method: request.method!, url: request.url!, headers: request.headers });
    request.resume();
    request.on('end', () => answer(request, response));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    received,
    close: () => {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}

const emptyPage = JSON.stringify({ data: [], meta: { page: 1, pageSize: 20, pageCount: 0, total: 0 } });

describe('a host is loopback by its text alone (D14)', () => {
  it.each([
    ['http://localhost:8080', true],
    ['http://LOCALHOST', true],
    ['http://playbook.localhost:8080', true],
    ['http://a.b.localhost', true],
    ['http://127.0.0.1:8080', true],
    ['http://127.0.0.2', true],
    ['http://127.255.255.254', true],
    // Every way of writing an IPv4 address is read as the URL parser reads it.
    ['http://0x7f.1', true],
    ['http://2130706433', true],
    ['http://0177.0.0.1', true],
    ['http://[::1]:8080', true],
    ['http://[0:0:0:0:0:0:0:1]', true],
    ['http://localhost.', false],
    ['http://localhost.example.com', false],
    ['http://notlocalhost', false],
    ['http://127.0.0.1.nip.io', false],
    ['http://128.0.0.1', false],
    ['http://[::ffff:127.0.0.1]', false],
    ['http://[::2]', false],
    ['http://0.0.0.0', false],
    ['http://playbook.invalid', false],
    ['not a url', false],
  ])('%s: %s', (url, loopback) => {
    expect(isLoopbackUrl(url)).toBe(loopback);
  });

  it('agrees with ipaddr.js on every IPv4 and IPv6 address', () => {
    const expected = (address: string) => ipaddr.parse(address).range() === 'loopback';
    fc.assert(
      fc.property(fc.oneof(fc.ipV4(), fc.ipV4Extended()), (address) => {
        // ipaddr.js reads the same extended forms (octal, hexadecimal, fewer parts) as the URL parser.
        if (!ipaddr.isValid(address)) return;
        expect(isLoopbackUrl(`http://${address}:8080/`), address).toBe(expected(address));
      }),
      { numRuns: 2000 },
    );
    fc.assert(
      fc.property(fc.ipV6(), (address) => {
        expect(isLoopbackUrl(`http://[${address}]:8080/`), address).toBe(expected(address));
      }),
      { numRuns: 2000 },
    );
    // Loopback ones are rare among random addresses: each one on its own.
    fc.assert(
      fc.property(fc.tuple(fc.nat(255), fc.nat(255), fc.nat(255)), ([b, c, d]) => {
        const address = `127.${b}.${c}.${d}`;
        expect(isLoopbackUrl(`http://${address}/`)).toBe(expected(address));
      }),
    );
  });
});

describe('the client sends a credential over plain http to loopback only (D14, D24)', () => {
  it.each(CREDENTIALS)(
    'refuses http to another host from the text alone, before anything is sent (%s)',
    (_kind, credential) => {
      let sent = 0;
      const fetch: typeof globalThis.fetch = async () => {
        sent++;
        return new Response(emptyPage);
      };
      for (const baseUrl of [
        'http://playbook.invalid',
        'http://10.0.0.5:8080',
        'http://[::ffff:127.0.0.1]:80',
      ]) {
        expect(() => new Playbook({ ...credential, baseUrl, fetch }), baseUrl).toThrow(TypeError);
        expect(
          () => new Playbook({ ...credential, baseUrl, fetch, allowInsecureHttp: false }),
          baseUrl,
        ).toThrow(
          /^Playbook: baseUrl is plain http to .+, which is not loopback: the credential would cross the network readable by anyone on the way; use https, or allowInsecureHttp: true to send it anyway$/,
        );
      }
      expect(sent).toBe(0);
    },
  );

  it.each(CREDENTIALS)(
    'sends it there when told to with allowInsecureHttp (%s)',
    async (_kind, credential) => {
      const sent: [string, Headers][] = [];
      const fetch: typeof globalThis.fetch = async (input, init) => {
        sent.push([String(input), new Headers(init?.headers)]);
        return new Response(emptyPage, { headers: { 'content-type': 'application/json' } });
      };
      const playbook = new Playbook({
        ...credential,
        baseUrl: 'http://playbook.invalid',
        fetch,
        allowInsecureHttp: true,
      });
      expect((await playbook.catalogs.list()).meta.total).toBe(0);
      expect(sent.map(([url]) => url)).toEqual(['http://playbook.invalid/v3/playbook/catalogs']);
      expect(sent[0]![1].has('apiKey' in credential ? 'x-api-key' : 'authorization')).toBe(true);
    },
  );

  it('takes https anywhere, and http to loopback hosts, without the option', () => {
    for (const baseUrl of [
      'https://playbook.example.com',
      'https://10.0.0.5',
      'http://localhost:8080',
      'http://playbook.localhost',
      'http://127.0.0.2:8080',
      'http://[::1]:8080',
    ]) {
      expect(() => new Playbook({ apiKey, baseUrl }), baseUrl).not.toThrow();
    }
  });
});

describe('the client never follows a redirect with a credential to another origin or to http (D24)', () => {
  let elsewhere: Awaited<ReturnType<typeof recordingServer>>;
  let redirecting: Awaited<ReturnType<typeof recordingServer>>;
  /** Where the redirecting server sends each request, and with which status. */
  let to: (request: http.IncomingMessage) => string;
  let status: number;

  beforeAll(async () => {
    elsewhere = await recordingServer((_request, response) => {
      response.writeHead(200, { 'content-type': 'application/json' }).end(emptyPage);
    });
    redirecting = await recordingServer((request, response) => {
      response.writeHead(status, { location: to(request), 'x-request-id': 'redirect-1' }).end();
    });
  });
  beforeEach(() => {
    elsewhere.received.length = 0;
    redirecting.received.length = 0;
  });
  afterAll(async () => {
    await elsewhere.close();
    await redirecting.close();
  });

  const calls = (playbook: Playbook) => [
    () => playbook.catalogs.list(),
    () => playbook.catalogs.put('handbook', { name: 'Handbook', version: '1', resources: [] }),
    () => playbook.apiKeys.create({ name: 'n', accountId: 'acme', scopes: ['playbook:read'] }),
  ];

  for (const redirect of [301, 302, 303, 307, 308]) {
    it.each(CREDENTIALS)(
      `${redirect} to another origin: refused, nothing arrives there (%s)`,
      async (_kind, credential) => {
        status = redirect;
        for (const target of [
          (request: http.IncomingMessage) => `${elsewhere.origin}${request.url}`,
          // The same server under another name is another origin, as a browser counts them.
          (request: http.IncomingMessage) =>
            `${elsewhere.origin.replace('127.0.0.1', 'localhost')}${request.url}`,
        ]) {
          to = target;
          const playbook = new Playbook({ ...credential, baseUrl: redirecting.origin, maxRetries: 0 });
          for (const call of calls(playbook)) {
            const refusal = await call().catch((error: unknown) => error);
            expect(refusal).toBeInstanceOf(PlaybookError);
            expect(refusal).toMatchObject({
              status: redirect,
              code: 'redirect_refused',
              requestId: 'redirect-1',
              detail: expect.stringMatching(
                /^the service redirected the request to another origin \(http:\/\/(127\.0\.0\.1|localhost):\d+\); /,
              ),
            });
            expect(String(refusal)).not.toContain(apiKey);
            expect(String(refusal)).not.toContain(accessToken);
          }
        }
        expect(redirecting.received).toHaveLength(6);
        expect(elsewhere.received).toEqual([]);
      },
    );
  }

  it('a redirect within the origin, over plain http (a loopback base), is not followed either', async () => {
    status = 307;
    to = (request) => `/elsewhere${request.url}`;
    const playbook = new Playbook({ apiKey, baseUrl: redirecting.origin, maxRetries: 0 });
    await expect(playbook.catalogs.list()).rejects.toMatchObject({
      code: 'redirect_refused',
      detail: expect.stringMatching(/^the service redirected the request over plain http; /),
    });
    expect(redirecting.received.map((request) => request.url)).toEqual(['/v3/playbook/catalogs']);
  });

  it.each(CREDENTIALS)(
    'from https to plain http on the same host: refused, nothing arrives (%s)',
    async (_kind, credential) => {
      // The https service stands in the client's fetch; what the client sends on goes to a real server,
      // the recording one, which listens on plain http at the same host and port.
      const { host } = new URL(elsewhere.origin);
      const secure = `https://${host}`;
      const fetch: typeof globalThis.fetch = async (input, init) => {
        if (String(input).startsWith(`${secure}/`)) {
          return new Response(null, {
            status: 301,
            headers: { location: String(input).replace('https:', 'http:') },
          });
        }
        return globalThis.fetch(input, init);
      };
      const playbook = new Playbook({ ...credential, baseUrl: secure, fetch, maxRetries: 0 });
      for (const call of calls(playbook)) {
        await expect(call()).rejects.toMatchObject({ status: 301, code: 'redirect_refused' });
      }
      expect(elsewhere.received).toEqual([]);
    },
  );

  it('follows a redirect within the same https origin with its credential, as fetch would', async () => {
    const origin = 'https://playbook.example.com';
    const seen: { url: string; method: string; body: unknown; headers: Headers }[] = [];
    const fetch: typeof globalThis.fetch = async (input, init) => {
      const url = String(input);
      seen.push({
        url,
        method: init?.method ?? 'GET',
        body: init?.body,
        headers: new Headers(init?.headers),
      });
      expect(init?.redirect).toBe('manual');
      if (url === `${origin}/v3/playbook/catalogs`) {
        return new Response(null, { status: 308, headers: { location: '/moved/v3/playbook/catalogs' } });
      }
      if (url === `${origin}/v3/identity/api-keys`) {
        return new Response(null, { status: 303, headers: { location: `${origin}/created` } });
      }
      return new Response(emptyPage, { headers: { 'content-type': 'application/json' } });
    };
    const playbook = new Playbook({ apiKey, baseUrl: origin, fetch });
    await playbook.catalogs.list();
    expect(seen.map(({ url, method }) => `${method} ${url}`)).toEqual([
      `GET ${origin}/v3/playbook/catalogs`,
      `GET ${origin}/moved/v3/playbook/catalogs`,
    ]);
    expect(seen.every(({ headers }) => headers.get('x-api-key') === apiKey)).toBe(true);

    seen.length = 0;
    await playbook.apiKeys.create({ name: 'n', accountId: 'acme', scopes: ['playbook:read'] });
    // A 303 is followed with a GET and no body.
    expect(seen.map(({ url, method, body }) => [method, url, body === undefined])).toEqual([
      ['POST', `${origin}/v3/identity/api-keys`, false],
      ['GET', `${origin}/created`, true],
    ]);
    expect(seen[1]!.headers.has('content-type')).toBe(false);
  });

  it('gives up after five redirects, and on a Location that is no URL', async () => {
    const origin = 'https://playbook.example.com';
    let sent = 0;
    const endless: typeof globalThis.fetch = async () => {
      sent++;
      return new Response(null, { status: 302, headers: { location: `/again-${sent}` } });
    };
    await expect(
      new Playbook({ apiKey, baseUrl: origin, fetch: endless }).catalogs.list(),
    ).rejects.toMatchObject({
      code: 'redirect_refused',
      detail: expect.stringMatching(/more than 5 times/),
    });
    expect(sent).toBe(6);
    const broken: typeof globalThis.fetch = async () =>
      new Response(null, { status: 301, headers: { location: 'http://[' } });
    await expect(
      new Playbook({ apiKey, baseUrl: origin, fetch: broken }).catalogs.list(),
    ).rejects.toMatchObject({
      code: 'redirect_refused',
      detail: expect.stringMatching(/to an address that is not a URL/),
    });
  });
});
