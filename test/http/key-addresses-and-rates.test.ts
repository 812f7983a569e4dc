import type { FastifyInstance, InjectOptions } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { KeyRestrictionsInput } from '../../src/schemas/identity.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { givenAccount } from '../helpers/fixtures.js';
import { publishedResource } from '../helpers/publish-bodies.js';

/**
 * D32 on both stacks: a key restricted to some client addresses is refused from any other with 403
 * ip_not_allowed (the address taken after PLAYBOOK_TRUST_PROXY), and a key's own rate counts beside
 * the deployment's, the RateLimit headers describing the tighter.
 */

type Headers = Record<string, string>;
const CATALOGS = '/v3/playbook/catalogs';

describe('keys restricted to addresses and a rate (D32)', () => {
  let backend: TestBackend;

  beforeAll(async () => {
    backend = await createTestBackend();
    await givenAccount(backend.databases.primary, 'acme');
  });
  afterAll(async () => {
    await backend.cleanup();
  });

  async function serviceWith(env: Record<string, string>) {
    const identity = createTestIdentity(backend, { env });
    const app = await buildIdentityApp(backend, identity);
    const mint = async (restrictions?: KeyRestrictionsInput) => {
      const key = await identity.mintKey({
        accountId: 'acme',
        scopes: ['playbook:read', 'playbook:write'],
        ...(restrictions ? { restrictions } : {}),
      });
      return { id: key.id, headers: key.headers as Headers };
    };
    return { identity, app, mint };
  }

  describe('addresses', () => {
    let identity: TestIdentity;
    let app: FastifyInstance;
    let key: Headers;

    beforeAll(async () => {
      // The service sits behind a proxy at 127.0.0.1, whose X-Forwarded-For it believes.
      ({ identity, app } = await serviceWith({
        PLAYBOOK_TRUST_PROXY: '127.0.0.1',
        PLAYBOOK_AUTH_FAILURE_MAX: '1000',
      }));
      key = (
        await identity.mintKey({
          accountId: 'acme',
          scopes: ['playbook:read', 'playbook:write'],
          restrictions: { allowedIps: ['10.0.0.0/8', '2001:db8::/32', '192.0.2.7'] },
        })
      ).headers;
    });
    afterAll(async () => {
      await app.close();
      await identity.close();
    });

    const from = (remoteAddress: string, options: InjectOptions = {}, headers: Headers = key) =>
      app.inject({ url: CATALOGS, ...options, headers: { ...headers, ...options.headers }, remoteAddress });

    it('takes the key from an address its list holds, IPv4, IPv6, or IPv4 written the IPv6 way', async () => {
      for (const address of ['10.1.2.3', '::ffff:10.1.2.3', '192.0.2.7', '::ffff:192.0.2.7', '2001:db8::5']) {
        expect((await from(address)).statusCode, address).toBe(200);
      }
    });

    it('refuses it from any other with 403 ip_not_allowed, naming neither the list nor the address', async () => {
      for (const address of ['192.0.2.8', '11.0.0.1', '2001:db9::1', '::ffff:11.0.0.1']) {
        const response = await from(address);
        expect(response.statusCode, address).toBe(403);
        const problem = response.json();
        expect(problem).toMatchObject({ code: 'ip_not_allowed', type: '/docs/problems/ip_not_allowed' });
        for (const named of [address, '10.0.0.0', '2001:db8', '192.0.2.7']) {
          expect(response.body).not.toContain(named);
        }
        // What the refusal counts against: the address's failed authentications (D10).
        expect(response.headers['ratelimit-limit']).toBe('1000');
      }
    });

    it('on every route the key takes: reads, the sync feed, publishing', async () => {
      const put = {
        method: 'PUT',
        url: '/v3/playbook/catalogs/org/runbooks',
        payload: { name: 'Runbooks', version: '1', resources: [publishedResource('deploy')] },
      } as const;
      const routes: InjectOptions[] = [
        { url: CATALOGS },
        { url: '/v3/playbook/catalogs/org/runbooks' },
        { url: '/v3/playbook/sync' },
        put,
      ];
      for (const route of routes) {
        const refused = await from('203.0.113.9', route);
        expect([refused.statusCode, refused.json().code], String(route.url)).toEqual([403, 'ip_not_allowed']);
      }
      expect((await from('10.0.0.9', put)).statusCode).toBe(201);
      expect((await from('10.0.0.9', { url: '/v3/playbook/catalogs/org/runbooks' })).statusCode).toBe(200);
    });

    it('takes the client address from a trusted proxy, and only from one', async () => {
      const forwarded = (address: string) => ({ headers: { 'x-forwarded-for': address } });
      expect((await from('127.0.0.1', forwarded('10.9.9.9'))).statusCode).toBe(200);
      expect((await from('127.0.0.1', forwarded('198.51.100.1'))).statusCode).toBe(403);
      // The rightmost address the trusted proxy did not add is the client's.
      expect((await from('127.0.0.1', forwarded('10.9.9.9, 198.51.100.1'))).statusCode).toBe(403);
      // From anywhere else the header is the client's own word, and not believed.
      expect((await from('198.51.100.1', forwarded('10.9.9.9'))).statusCode).toBe(403);
      // Seen from the proxy itself, with nothing forwarded, the address is the proxy's.
      expect((await from('127.0.0.1')).statusCode).toBe(403);
    });

    it('applies a change of the list at once', async () => {
      const minted = await identity.mintKey({
        accountId: 'acme',
        restrictions: { allowedIps: ['10.0.0.1'] },
      });
      expect((await from('10.0.0.2', {}, minted.headers)).statusCode).toBe(403);
      const ada = await identity.tokenHeaders({ user: 'ada', accounts: ['acme'] });
      const patched = await app.inject({
        method: 'PATCH',
        url: `/v3/identity/api-keys/${minted.id}`,
        headers: ada,
        payload: { restrictions: { allowedIps: ['10.0.0.0/30'] } },
      });
      expect(patched.statusCode, patched.body).toBe(200);
      expect((await from('10.0.0.2', {}, minted.headers)).statusCode).toBe(200);
      expect((await from('10.0.0.4', {}, minted.headers)).statusCode).toBe(403);
    });
  });

  it("refusals count against the address's failed authentications, never against the key's budget", async () => {
    const { identity, app, mint } = await serviceWith({ PLAYBOOK_AUTH_FAILURE_MAX: '2' });
    try {
      const restricted = await mint({ allowedIps: ['10.0.0.0/8'] });
      const elsewhere = () =>
        app.inject({ url: CATALOGS, headers: restricted.headers, remoteAddress: '198.51.100.7' });
      expect((await elsewhere()).statusCode).toBe(403);
      expect((await elsewhere()).statusCode).toBe(403);
      const third = await elsewhere();
      expect([third.statusCode, third.json().code]).toEqual([429, 'rate_limited']);
      // A valid credential from the same address is never refused by that limit.
      const other = await mint();
      const valid = await app.inject({
        url: CATALOGS,
        headers: other.headers,
        remoteAddress: '198.51.100.7',
      });
      expect(valid.statusCode).toBe(200);
      // The key's own budget is whole where it may be used.
      const used = await app.inject({
        url: CATALOGS,
        headers: restricted.headers,
        remoteAddress: '10.0.0.1',
      });
      expect(used.statusCode).toBe(200);
      expect(Number(used.headers['ratelimit-remaining'])).toBe(Number(used.headers['ratelimit-limit']) - 1);
    } finally {
      await app.close();
      await identity.close();
    }
  });

  describe('a rate of its own', () => {
    let identity: TestIdentity;
    let app: FastifyInstance;
    let mint: (restrictions?: KeyRestrictionsInput) => Promise<{ id: string; headers: Headers }>;
    let ada: Headers;
    const limits = (response: { headers: Record<string, unknown> }) => [
      Number(response.headers['ratelimit-limit']),
      Number(response.headers['ratelimit-remaining']),
    ];

    beforeAll(async () => {
      ({ identity, app, mint } = await serviceWith({
        PLAYBOOK_RATE_LIMIT_MAX: '10',
        PLAYBOOK_RATE_LIMIT_WINDOW_MS: '60000',
      }));
      ada = await identity.tokenHeaders({ user: 'ada', accounts: ['acme'] });
    });
    afterAll(async () => {
      await app.close();
      await identity.close();
    });

    it('429 past its own limit, with headers of that limit while it has fewer requests left', async () => {
      const { headers } = await mint({ rateLimit: { limit: 3, windowSeconds: 60 } });
      const seen: number[][] = [];
      for (let i = 0; i < 3; i++) {
        const response = await app.inject({ url: CATALOGS, headers });
        expect(response.statusCode).toBe(200);
        seen.push(limits(response));
      }
      expect(seen).toEqual([
        [3, 2],
        [3, 1],
        [3, 0],
      ]);
      const refused = await app.inject({ url: CATALOGS, headers });
      expect(refused.statusCode).toBe(429);
      expect(refused.json().code).toBe('rate_limited');
      expect(refused.json().detail).toContain("this key's own limit");
      expect(Number(refused.headers['retry-after'])).toBeGreaterThan(0);
      expect(Number(refused.headers['retry-after'])).toBeLessThanOrEqual(60);
      expect(limits(refused)).toEqual([3, 0]);
    });

    it("both limits count: the deployment's refuses when it has fewer left, and its headers say so", async () => {
      const { id, headers } = await mint();
      for (let i = 0; i < 6; i++) await app.inject({ url: CATALOGS, headers });
      const patched = await app.inject({
        method: 'PATCH',
        url: `/v3/identity/api-keys/${id}`,
        headers: ada,
        payload: { restrictions: { rateLimit: { limit: 8, windowSeconds: 60 } } },
      });
      expect(patched.statusCode, patched.body).toBe(200);
      // Seven of the deployment's ten are used, one of the key's eight.
      expect(limits(await app.inject({ url: CATALOGS, headers }))).toEqual([10, 3]);
      for (let i = 0; i < 3; i++) expect((await app.inject({ url: CATALOGS, headers })).statusCode).toBe(200);
      const refused = await app.inject({ url: CATALOGS, headers });
      expect(refused.statusCode).toBe(429);
      expect(refused.json().detail).not.toContain("this key's own limit");
      expect(limits(refused)).toEqual([10, 0]);
    });

    it('a rate at its window, over a longer window than the deployment’s, counts there', async () => {
      const { headers } = await mint({ rateLimit: { limit: 2, windowSeconds: 3600 } });
      await app.inject({ url: CATALOGS, headers });
      const second = await app.inject({ url: CATALOGS, headers });
      expect(limits(second)).toEqual([2, 0]);
      expect(Number(second.headers['ratelimit-reset'])).toBeGreaterThan(60);
      expect((await app.inject({ url: CATALOGS, headers })).statusCode).toBe(429);
    });
  });
});
