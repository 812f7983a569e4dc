import type { FastifyInstance } from 'fastify';
import { SignJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { givenCatalog } from '../helpers/fixtures.js';
import { AUDIENCE, ISSUER, JwksServer, type SigningKey, sign, signingKey } from '../helpers/jwks.js';

describe('access tokens from a remote JWKS (D9)', () => {
  let backend: TestBackend;
  let identity: TestIdentity;
  let app: FastifyInstance;
  const jwks = new JwksServer();
  let first: SigningKey;
  let second: SigningKey;

  beforeAll(async () => {
    backend = await createTestBackend();
    const url = await jwks.start();
    first = await signingKey('2031-01', 'RS256');
    second = await signingKey('2031-02', 'ES256');
    jwks.keys = [first.publicJwk];
    identity = createTestIdentity(backend, {
      env: { PLAYBOOK_JWKS_URL: url, PLAYBOOK_JWT_ISSUER: ISSUER, PLAYBOOK_JWT_AUDIENCE: AUDIENCE },
      // No cooldown, so that the rotation below needs no waiting; production keeps jose's 30 s.
      options: { jwks: { cooldownDuration: 0 } },
    });
    app = await buildIdentityApp(backend, identity);
    await givenCatalog(backend.databases.primary, { slug: 'handbook' });
  });
  afterAll(async () => {
    await app.close();
    await identity.close();
    await jwks.stop().catch(() => {});
    await backend.cleanup();
  });

  const catalogs = (token: string) =>
    app.inject({ url: '/v3/playbook/catalogs', headers: { authorization: `Bearer ${token}` } });

  it('has no embedded signer when a JWKS URL is configured', () => {
    expect(identity.signer).toBeUndefined();
  });

  it('verifies end to end, fetching the key set once and caching it', async () => {
    const token = await sign(first, { sub: 'ada', accounts: ['acme'] });
    for (let i = 0; i < 3; i++) expect((await catalogs(token)).statusCode).toBe(200);
    expect(jwks.fetches).toBe(1);

    // The token's user creates a key for her account and reads with it.
    const created = await app.inject({
      method: 'POST',
      url: '/v3/identity/api-keys',
      headers: { authorization: `Bearer ${token}` },
      payload: { name: 'ci', accountId: 'acme', scopes: ['playbook:read'] },
    });
    expect(created.statusCode).toBe(201);
    const read = await app.inject({
      url: '/v3/playbook/catalogs',
      headers: { 'x-api-key': created.json().key },
    });
    expect(read.statusCode).toBe(200);
  });

  it('follows a key rotation: an unknown kid fetches the key set again', async () => {
    const before = jwks.fetches;
    // The provider publishes the new key beside the old one, then starts signing with it.
    jwks.keys = [first.publicJwk, second.publicJwk];
    const rotated = await sign(second, { sub: 'ada', accounts: ['acme'] });
    expect((await catalogs(rotated)).statusCode).toBe(200);
    expect(jwks.fetches).toBe(before + 1);
    // Tokens of the old key stay valid while it is published.
    expect((await catalogs(await sign(first, { sub: 'ada', accounts: ['acme'] }))).statusCode).toBe(200);

    // The provider retires the old key: its tokens stop verifying once the set is fetched again.
    jwks.keys = [second.publicJwk];
    const retired = await sign(first, { sub: 'ada', accounts: ['acme'] });
    const newKid = await signingKey('2031-03', 'ES256');
    // A token with an unknown kid makes the verifier fetch; the new set no longer holds the old key.
    expect((await catalogs(await sign(newKid, { sub: 'eve', accounts: [] }))).statusCode).toBe(401);
    expect((await catalogs(retired)).statusCode).toBe(401);
    expect((await catalogs(rotated)).statusCode).toBe(200);
  });

  it('refuses a symmetric token even when the key set publishes a matching secret', async () => {
    const secret = new TextEncoder().encode('s'.repeat(32));
    jwks.keys = [
      second.publicJwk,
      { kty: 'oct', kid: 'shared', k: Buffer.from(secret).toString('base64url') },
    ];
    const token = await new SignJWT({ accounts: ['acme'] })
      .setProtectedHeader({ alg: 'HS256', kid: 'shared' })
      .setSubject('mallory')
      .setIssuer(ISSUER)
      .setAudience(AUDIENCE)
      .setExpirationTime('10m')
      .sign(secret);
    const response = await catalogs(token);
    expect(response.statusCode).toBe(401);
  });

  it('refuses tokens of another issuer or audience', async () => {
    const otherIssuer = await new SignJWT({ accounts: [] })
      .setProtectedHeader({ alg: second.alg, kid: second.kid })
      .setSubject('ada')
      .setIssuer('https://elsewhere.example')
      .setAudience(AUDIENCE)
      .setExpirationTime('10m')
      .sign(second.privateKey);
    expect((await catalogs(otherIssuer)).statusCode).toBe(401);
    const otherAudience = await new SignJWT({ accounts: [] })
      .setProtectedHeader({ alg: second.alg, kid: second.kid })
      .setSubject('ada')
      .setIssuer(ISSUER)
      .setAudience('another-service')
      .setExpirationTime('10m')
      .sign(second.privateKey);
    expect((await catalogs(otherAudience)).statusCode).toBe(401);
  });

  it('answers 503, not 401, when the key set the provider serves is malformed', async () => {
    jwks.malformed = true;
    try {
      const unknown = await signingKey('2031-05', 'ES256');
      const response = await catalogs(await sign(unknown, { sub: 'ada', accounts: [] }));
      expect(response.statusCode).toBe(503);
      expect(response.json().code).toBe('unavailable');
    } finally {
      jwks.malformed = false;
    }
  });

  it('answers 503 when the key set cannot be fetched for a new kid', async () => {
    await jwks.stop();
    const unknown = await signingKey('2031-04', 'ES256');
    const response = await catalogs(await sign(unknown, { sub: 'ada', accounts: [] }));
    expect(response.statusCode).toBe(503);
    expect(response.json().code).toBe('unavailable');
  });
});
