import fs from 'node:fs/promises';
import type { FastifyInstance } from 'fastify';
import { base64url, generateKeyPair, importJWK, type JWK, SignJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { givenAccount, givenCatalog, givenResource } from '../helpers/fixtures.js';

const CATALOGS = '/v3/playbook/catalogs';
const KEYS = '/v3/identity/api-keys';

function bearer(token: string): Record<string, string> {
  return { authorization: `Bearer ${token}` };
}

/** Re-encodes a segment of a compact JWT without re-signing it. */
function withPayload(token: string, change: (payload: Record<string, unknown>) => void): string {
  const [header, payload, signature] = token.split('.') as [string, string, string];
  const claims = JSON.parse(new TextDecoder().decode(base64url.decode(payload))) as Record<string, unknown>;
  change(claims);
  return `${header}.${base64url.encode(JSON.stringify(claims))}.${signature}`;
}

describe('access tokens (D9)', () => {
  let backend: TestBackend;
  const apps: { app: FastifyInstance; identity: TestIdentity }[] = [];
  let identity: TestIdentity;
  let app: FastifyInstance;

  async function serviceWith(env: Record<string, string> = {}) {
    const built = createTestIdentity(backend, { env });
    const builtApp = await buildIdentityApp(backend, built);
    apps.push({ app: builtApp, identity: built });
    return { identity: built, app: builtApp };
  }

  beforeAll(async () => {
    backend = await createTestBackend();
    ({ identity, app } = await serviceWith());
    const db = backend.databases.primary;
    await givenAccount(db, 'acme', 'pro');
    await givenAccount(db, 'globex');
    await givenCatalog(db, { slug: 'handbook' });
    await givenCatalog(db, { slug: 'acme-notes', accountId: 'acme' });
    await givenCatalog(db, { slug: 'globex-notes', accountId: 'globex' });
  });
  afterAll(async () => {
    for (const built of apps) {
      await built.app.close();
      await built.identity.close();
    }
    await backend.cleanup();
  });

  const slugsOf = (response: { json(): { data: { slug: string }[] } }) =>
    response.json().data.map((c) => c.slug);

  it('reads with a token: the only account is selected, with playbook:read', async () => {
    const response = await app.inject({
      url: CATALOGS,
      headers: await identity.tokenHeaders({ accounts: ['acme'] }),
    });
    expect(response.statusCode).toBe(200);
    expect(slugsOf(response)).toEqual(['handbook', 'acme-notes']);
  });

  it('selects the account named by x-account-id among several', async () => {
    const headers = await identity.tokenHeaders({ accounts: ['acme', 'globex'] });
    const globex = await app.inject({ url: CATALOGS, headers: { ...headers, 'x-account-id': 'globex' } });
    expect(slugsOf(globex)).toEqual(['handbook', 'globex-notes']);
    // Several accounts and none chosen: service-owned content only.
    expect(slugsOf(await app.inject({ url: CATALOGS, headers }))).toEqual(['handbook']);
  });

  it('a user with no account sees service-owned content only', async () => {
    const response = await app.inject({
      url: CATALOGS,
      headers: await identity.tokenHeaders({ accounts: [] }),
    });
    expect(slugsOf(response)).toEqual(['handbook']);
  });

  it('403: x-account-id names an account the user may not act for', async () => {
    const headers = await identity.tokenHeaders({ accounts: ['acme'] });
    const response = await app.inject({ url: CATALOGS, headers: { ...headers, 'x-account-id': 'globex' } });
    expect(response.statusCode).toBe(403);
    expect(response.json().code).toBe('forbidden');
  });

  it("acts with the selected account's plan", async () => {
    const db = backend.databases.primary;
    const gated = await givenCatalog(db, { slug: 'pro-docs', facets: { planAccess: ['pro'] } });
    const resource = await givenResource(backend, gated, {
      slug: 'deep-dive',
      facets: { planAccess: ['pro'] },
    });
    const url = `/v3/playbook/resources/${resource.id}`;
    const pro = await app.inject({ url, headers: await identity.tokenHeaders({ accounts: ['acme'] }) });
    expect(pro.statusCode).toBe(200);
    const free = await app.inject({ url, headers: await identity.tokenHeaders({ accounts: ['globex'] }) });
    expect(free.statusCode).toBe(403);
    expect(free.json().code).toBe('plan_required');
  });

  describe('401', () => {
    const expect401 = async (headers: Record<string, string>, url = CATALOGS) => {
      const response = await app.inject({ url, headers });
      expect(response.statusCode).toBe(401);
      expect(response.json().code).toBe('unauthenticated');
      return response.json().detail as string;
    };

    it('missing token on key management', async () => {
      await expect401({}, `${KEYS}?accountId=acme`);
    });

    it.each([
      ['no scheme', 'abc.def.ghi'],
      ['Basic scheme', 'Basic dXNlcjpwYXNz'],
      ['Bearer without token', 'Bearer '],
      ['not a JWT', 'Bearer not-a-jwt'],
      ['two segments', 'Bearer eyJhbGciOiJFUzI1NiJ9.e30'],
      ['garbage segments', 'Bearer aaa.bbb.ccc'],
    ])('malformed: %s', async (_label, authorization) => {
      await expect401({ authorization });
    });

    it('tampered: claims changed after signing', async () => {
      const token = await identity.mintToken({ accounts: ['globex'] });
      expect(await expect401(bearer(withPayload(token, (claims) => (claims.accounts = ['acme']))))).toBe(
        'the access token is not valid',
      );
    });

    it('unsigned: alg none', async () => {
      const header = base64url.encode(JSON.stringify({ alg: 'none', typ: 'JWT' }));
      const exp = Math.floor(Date.now() / 1000) + 600;
      const payload = base64url.encode(JSON.stringify({ sub: 'mallory', accounts: ['acme'], exp }));
      await expect401(bearer(`${header}.${payload}.`));
    });

    it('symmetric: HS256, even with a key that looks like ours', async () => {
      const token = await new SignJWT({ accounts: ['acme'] })
        .setProtectedHeader({ alg: 'HS256' })
        .setSubject('mallory')
        .setExpirationTime('10m')
        .sign(new TextEncoder().encode('a'.repeat(32)));
      await expect401(bearer(token));
    });

    it('signed by another key pair', async () => {
      const { privateKey } = await generateKeyPair('ES256');
      const token = await new SignJWT({ accounts: ['acme'] })
        .setProtectedHeader({ alg: 'ES256' })
        .setSubject('mallory')
        .setExpirationTime('10m')
        .sign(privateKey);
      await expect401(bearer(token));
    });

    it('expired', async () => {
      const issuedAt = Math.floor(Date.now() / 1000) - 120;
      const token = await identity.mintToken({ accounts: ['acme'], issuedAt, ttlSeconds: 60 });
      expect(await expect401(bearer(token))).toBe('the access token has expired');
    });

    it('without exp, even when properly signed', async () => {
      const jwk = JSON.parse(await fs.readFile(identity.signer!.file, 'utf8')) as JWK;
      const token = await new SignJWT({ accounts: ['acme'] })
        .setProtectedHeader({ alg: 'ES256', kid: jwk.kid! })
        .setSubject('ada')
        .setIssuer('urn:playbook:dev')
        .sign(await importJWK(jwk, 'ES256'));
      expect(await expect401(bearer(token))).toBe("the access token's exp claim is not accepted");
    });

    it('living longer than PLAYBOOK_JWT_MAX_TTL_S, however well signed (D20)', async () => {
      // Default 86400: a day is accepted to the second, a second more is not.
      const day = await identity.mintToken({ accounts: ['acme'], ttlSeconds: 86_400 });
      expect((await app.inject({ url: CATALOGS, headers: bearer(day) })).statusCode).toBe(200);
      const longer = await identity.mintToken({ accounts: ['acme'], ttlSeconds: 86_400 + 60 });
      expect(await expect401(bearer(longer))).toBe(
        'the access token expires more than 86400 seconds from now; this service accepts none that live longer',
      );
      const short = await serviceWith({ PLAYBOOK_JWT_MAX_TTL_S: '600' });
      const hour = await identity.mintToken({ accounts: ['acme'], ttlSeconds: 3600 });
      expect((await app.inject({ url: CATALOGS, headers: bearer(hour) })).statusCode).toBe(200);
      const refused = await short.app.inject({ url: CATALOGS, headers: bearer(hour) });
      expect(refused.statusCode).toBe(401);
      expect(refused.json().code).toBe('unauthenticated');
      // The bound is on what is left: a long token issued long ago is fine once close to its end.
      const issuedAt = Math.floor(Date.now() / 1000) - 3300;
      const old = await identity.mintToken({ accounts: ['acme'], issuedAt, ttlSeconds: 3600 });
      expect((await short.app.inject({ url: CATALOGS, headers: bearer(old) })).statusCode).toBe(200);
    });

    it('an accounts claim that is not a list of account ids', async () => {
      // Pointing the claim name at `iss`, a string, makes the dev signer sign a claim that is not a list.
      const odd = await serviceWith({ PLAYBOOK_JWT_ACCOUNTS_CLAIM: 'iss' });
      const token = await identity.mintToken({ accounts: ['acme'] });
      const response = await odd.app.inject({ url: CATALOGS, headers: bearer(token) });
      expect(response.statusCode).toBe(401);
      expect(response.json().detail).toBe("the access token's iss claim is not a list");
    });
  });

  it('honours a configured clock tolerance', async () => {
    const tolerant = await serviceWith({ PLAYBOOK_JWT_CLOCK_TOLERANCE_S: '120' });
    const issuedAt = Math.floor(Date.now() / 1000) - 90;
    const token = await identity.mintToken({ accounts: ['acme'], issuedAt, ttlSeconds: 60 });
    expect((await app.inject({ url: CATALOGS, headers: bearer(token) })).statusCode).toBe(401);
    expect((await tolerant.app.inject({ url: CATALOGS, headers: bearer(token) })).statusCode).toBe(200);
  });

  it('checks a verified token again against its exp, with the clock tolerance, as verify does (D27)', async () => {
    const tolerant = await serviceWith({ PLAYBOOK_JWT_CLOCK_TOLERANCE_S: '120' });
    const before = Math.floor(Date.now() / 1000);
    const { expiresAt } = await identity.tokens.verify(
      await identity.mintToken({ accounts: ['acme'], ttlSeconds: 60 }),
    );
    expect(expiresAt - before).toBeGreaterThanOrEqual(60);
    expect(expiresAt - before).toBeLessThanOrEqual(61);
    identity.tokens.checkNotExpired(expiresAt);
    const now = Math.floor(Date.now() / 1000);
    expect(() => identity.tokens.checkNotExpired(now)).toThrow('the access token has expired');
    tolerant.identity.tokens.checkNotExpired(now - 100);
    expect(() => tolerant.identity.tokens.checkNotExpired(now - 130)).toThrow('the access token has expired');
  });

  it('reads the accounts from the configured claim name', async () => {
    const custom = await serviceWith({ PLAYBOOK_JWT_ACCOUNTS_CLAIM: 'https://playbook.example/accounts' });
    const token = await custom.identity.mintToken({ accounts: ['acme'] });
    const response = await custom.app.inject({ url: CATALOGS, headers: bearer(token) });
    expect(slugsOf(response)).toContain('acme-notes');
    expect(slugsOf(response)).not.toContain('globex-notes');
  });

  describe('issuer and audience, when configured', () => {
    it('401: wrong issuer', async () => {
      const strict = await serviceWith({ PLAYBOOK_JWT_ISSUER: 'https://id.example' });
      const good = await strict.identity.mintToken({ accounts: ['acme'] });
      expect((await strict.app.inject({ url: CATALOGS, headers: bearer(good) })).statusCode).toBe(200);
      // Same signing key (same data directory), issuer `urn:playbook:dev`.
      const other = await identity.mintToken({ accounts: ['acme'] });
      const response = await strict.app.inject({ url: CATALOGS, headers: bearer(other) });
      expect(response.statusCode).toBe(401);
      expect(response.json().detail).toBe("the access token's iss claim is not accepted");
    });

    it('401: wrong or missing audience', async () => {
      const strict = await serviceWith({ PLAYBOOK_JWT_AUDIENCE: 'playbook-api' });
      const good = await strict.identity.mintToken({ accounts: ['acme'] });
      expect((await strict.app.inject({ url: CATALOGS, headers: bearer(good) })).statusCode).toBe(200);
      const elsewhere = await serviceWith({ PLAYBOOK_JWT_AUDIENCE: 'another-api' });
      const wrong = await elsewhere.identity.mintToken({ accounts: ['acme'] });
      expect((await strict.app.inject({ url: CATALOGS, headers: bearer(wrong) })).statusCode).toBe(401);
      const none = await identity.mintToken({ accounts: ['acme'] });
      expect((await strict.app.inject({ url: CATALOGS, headers: bearer(none) })).statusCode).toBe(401);
    });
  });

  describe('credentials per route', () => {
    it('401: an API key on key management', async () => {
      const { headers } = await identity.mintKey({ accountId: 'acme' });
      const response = await app.inject({ url: `${KEYS}?accountId=acme`, headers });
      expect(response.statusCode).toBe(401);
      expect(response.json().detail).toMatch(/needs a user access token/);
    });

    it('400: both x-api-key and Authorization, on reads and on key management', async () => {
      const { headers } = await identity.mintKey({ accountId: 'acme' });
      const token = await identity.tokenHeaders({ accounts: ['acme'] });
      for (const url of [CATALOGS, `${KEYS}?accountId=acme`]) {
        const response = await app.inject({ url, headers: { ...headers, ...token } });
        expect(response.statusCode).toBe(400);
        expect(response.json().errors).toEqual([
          {
            in: 'header',
            name: 'x-api-key',
            message: 'send one credential: x-api-key or Authorization, not both',
          },
        ]);
      }
    });
  });
});
