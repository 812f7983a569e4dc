import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ApiKeyLookup } from '../../src/auth/api-key-verifier.js';
import { type SecretHasher, sha256Hasher } from '../../src/auth/secret-digest.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';

const CATALOGS = '/v3/playbook/catalogs';

describe('rate limits (D10)', () => {
  let backend: TestBackend;
  let identity: TestIdentity;
  let app: FastifyInstance;
  let clock = Date.parse('2031-03-01T00:00:00.000Z');
  const work = { digests: 0, lookups: 0 };
  const hasher: SecretHasher = {
    digest: (secret) => {
      work.digests++;
      return sha256Hasher.digest(secret);
    },
  };

  beforeAll(async () => {
    backend = await createTestBackend();
    identity = createTestIdentity(backend, {
      env: {
        PLAYBOOK_RATE_LIMIT_MAX: '3',
        PLAYBOOK_RATE_LIMIT_WINDOW_MS: '10000',
        PLAYBOOK_AUTH_FAILURE_MAX: '2',
      },
      options: {
        now: () => clock,
        hasher,
        keyLookup: (lookup: ApiKeyLookup) => ({
          find: (keyId) => {
            work.lookups++;
            return lookup.find(keyId);
          },
        }),
      },
    });
    app = await buildIdentityApp(backend, identity);
  });
  afterAll(async () => {
    await app.close();
    await identity.close();
    await backend.cleanup();
  });

  /** Each test starts a fresh window, so that counts do not leak between tests. */
  const nextWindow = () => {
    clock += 10_000;
  };

  function expectHeaders(response: { headers: Record<string, unknown> }, limit: number, remaining: number) {
    expect(response.headers['ratelimit-limit']).toBe(String(limit));
    expect(response.headers['ratelimit-remaining']).toBe(String(remaining));
    expect(Number(response.headers['ratelimit-reset'])).toBeGreaterThan(0);
    expect(Number(response.headers['ratelimit-reset'])).toBeLessThanOrEqual(10);
  }

  it('counts per API key: RateLimit-* on every answer, then 429 with Retry-After', async () => {
    nextWindow();
    const a = await identity.mintKey({ accountId: 'acme' });
    const b = await identity.mintKey({ accountId: 'acme' });
    for (const remaining of [2, 1, 0]) {
      const response = await app.inject({ url: CATALOGS, headers: a.headers, remoteAddress: '10.0.0.1' });
      expect(response.statusCode).toBe(200);
      expectHeaders(response, 3, remaining);
    }
    clock += 4000;
    const limited = await app.inject({ url: CATALOGS, headers: a.headers, remoteAddress: '10.0.0.1' });
    expect(limited.statusCode).toBe(429);
    expect(limited.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(limited.json()).toMatchObject({ status: 429, code: 'rate_limited' });
    expectHeaders(limited, 3, 0);
    expect(limited.headers['retry-after']).toBe('6');
    // Another credential from the same address has its own budget.
    expect(
      (await app.inject({ url: CATALOGS, headers: b.headers, remoteAddress: '10.0.0.1' })).statusCode,
    ).toBe(200);
    // A new window starts afresh.
    clock += 6000;
    const again = await app.inject({ url: CATALOGS, headers: a.headers });
    expect(again.statusCode).toBe(200);
    expectHeaders(again, 3, 2);
  });

  it('counts per token subject, across tokens and addresses', async () => {
    nextWindow();
    for (let i = 0; i < 3; i++) {
      const headers = await identity.tokenHeaders({ user: 'ada', accounts: ['acme'] });
      const response = await app.inject({ url: CATALOGS, headers, remoteAddress: `10.0.1.${i}` });
      expect(response.statusCode).toBe(200);
    }
    const fresh = await identity.tokenHeaders({ user: 'ada', accounts: ['acme'] });
    expect(
      (await app.inject({ url: '/v3/identity/api-keys?accountId=acme', headers: fresh })).statusCode,
    ).toBe(429);
    const other = await identity.tokenHeaders({ user: 'bob', accounts: ['acme'] });
    expect((await app.inject({ url: CATALOGS, headers: other })).statusCode).toBe(200);
  });

  it('counts a 403 against the credential and puts the headers on it', async () => {
    nextWindow();
    const writer = await identity.mintKey({ accountId: 'acme', scopes: ['playbook:write'] });
    const response = await app.inject({ url: CATALOGS, headers: writer.headers });
    expect(response.statusCode).toBe(403);
    expectHeaders(response, 3, 2);
  });

  it('D10: never counts /healthz, /readyz, /v3/openapi.json, /docs or unknown paths', async () => {
    nextWindow();
    for (const url of ['/healthz', '/readyz', '/v3/openapi.json', '/docs', '/v3/nothing-here']) {
      for (let i = 0; i < 10; i++) {
        const response = await app.inject({ url, remoteAddress: '10.0.2.1' });
        expect(response.statusCode, url).not.toBe(429);
        expect(response.headers['ratelimit-limit'], url).toBeUndefined();
      }
    }
  });

  it('D10: counts failed authentications per address; past the budget a failure is 429, a valid credential never', async () => {
    nextWindow();
    const good = await identity.mintKey({ accountId: 'acme' });
    const bad = { 'x-api-key': good.key.replace(/_([A-Za-z0-9])/, '_Z') };
    const address = '10.0.3.1';

    // Successes are not failures.
    expect(
      (await app.inject({ url: CATALOGS, headers: good.headers, remoteAddress: address })).statusCode,
    ).toBe(200);
    for (const remaining of [1, 0]) {
      const response = await app.inject({ url: CATALOGS, headers: bad, remoteAddress: address });
      expect(response.statusCode).toBe(401);
      // On a refused credential the headers tell the address's remaining failure budget.
      expectHeaders(response, 2, remaining);
    }
    const blocked = await app.inject({ url: CATALOGS, headers: bad, remoteAddress: address });
    expect(blocked.statusCode).toBe(429);
    expect(blocked.json().code).toBe('rate_limited');
    expect(Number(blocked.headers['retry-after'])).toBeGreaterThan(0);
    expectHeaders(blocked, 2, 0);
    // The address is over its failure budget, yet a valid key from it is served, and counted as itself.
    const served = await app.inject({ url: CATALOGS, headers: good.headers, remoteAddress: address });
    expect(served.statusCode).toBe(200);
    expectHeaders(served, 3, 1);
    // Probes from that address are never refused either.
    expect((await app.inject({ url: '/healthz', remoteAddress: address })).statusCode).toBe(200);
    expect((await app.inject({ url: '/readyz', remoteAddress: address })).statusCode).toBe(200);
    // After the window, failures are answered 401 again.
    nextWindow();
    expect((await app.inject({ url: CATALOGS, headers: bad, remoteAddress: address })).statusCode).toBe(401);
  });

  describe('the client address behind a proxy (PLAYBOOK_TRUST_PROXY)', () => {
    /** Failed attempts from the proxy at 127.0.0.1 until one is refused 429; how many got through. */
    async function failuresBefore429(setting: string, forwardedFor: (attempt: number) => string) {
      const proxied = createTestIdentity(backend, {
        env: { PLAYBOOK_TRUST_PROXY: setting, PLAYBOOK_AUTH_FAILURE_MAX: '2' },
        options: { now: () => clock },
      });
      const proxiedApp = await buildIdentityApp(backend, proxied);
      try {
        for (let attempt = 0; attempt < 6; attempt++) {
          const response = await proxiedApp.inject({
            url: CATALOGS,
            headers: { 'x-api-key': 'svc_sk_test_nope', 'x-forwarded-for': forwardedFor(attempt) },
            remoteAddress: '127.0.0.1',
          });
          if (response.statusCode === 429) return attempt;
          expect(response.statusCode).toBe(401);
        }
        return Number.POSITIVE_INFINITY;
      } finally {
        await proxiedApp.close();
        await proxied.close();
      }
    }
    // The client writes the leftmost entries itself; the proxy appends the address it saw.
    const spoofing = (attempt: number) => `198.51.100.${attempt}, 203.0.113.7`;

    it('with the proxy addresses, the rightmost untrusted entry counts: a spoofed leftmost changes nothing', async () => {
      nextWindow();
      expect(await failuresBefore429('127.0.0.1', spoofing)).toBe(2);
    });

    it('with a hop count, the entry that many hops from the right counts', async () => {
      nextWindow();
      expect(await failuresBefore429('1', spoofing)).toBe(2);
    });

    it('with true, the leftmost entry counts, so a client that writes its own escapes the limit', async () => {
      nextWindow();
      // What the README warns of: only for a proxy that replaces the header.
      expect(await failuresBefore429('true', spoofing)).toBe(Number.POSITIVE_INFINITY);
      expect(await failuresBefore429('true', () => '203.0.113.7')).toBe(2);
    });

    it('without it, every client behind the proxy is the proxy', async () => {
      nextWindow();
      expect(await failuresBefore429('false', (attempt) => `198.51.100.${attempt}`)).toBe(2);
    });
  });

  it('counts missing credentials and tokens refused on key management as failures too', async () => {
    nextWindow();
    const address = '10.0.4.1';
    expect((await app.inject({ url: CATALOGS, remoteAddress: address })).statusCode).toBe(401);
    const key = await identity.mintKey({ accountId: 'acme' });
    const misuse = await app.inject({
      url: '/v3/identity/api-keys?accountId=acme',
      headers: key.headers,
      remoteAddress: address,
    });
    expect(misuse.statusCode).toBe(401);
    expect((await app.inject({ url: CATALOGS, remoteAddress: address })).statusCode).toBe(429);
  });
});
