import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isLoopbackAddress } from '../../src/auth/dev-sign-in.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { liveEnv } from '../helpers/jwks.js';

const SIGN_IN = '/v3/identity/dev-sign-in';

/** The claims of a compact JWS, unverified: what the test checks it was given. */
function claims(token: string): Record<string, unknown> {
  return JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString()) as Record<string, unknown>;
}

describe('POST /v3/identity/dev-sign-in (D33)', () => {
  let backend: TestBackend;
  const opened: { close(): Promise<void> }[] = [];

  beforeAll(async () => {
    backend = await createTestBackend();
  });
  afterAll(async () => {
    for (const item of opened.reverse()) await item.close();
    await backend.cleanup();
  });

  async function appWith(
    env: Record<string, string> = {},
  ): Promise<{ app: FastifyInstance; identity: TestIdentity }> {
    const identity = createTestIdentity(backend, { env });
    const app = await buildIdentityApp(backend, identity);
    opened.push(identity, app);
    return { app, identity };
  }

  const signIn = (app: FastifyInstance, payload: unknown, remoteAddress?: string, headers = {}) =>
    app.inject({
      method: 'POST',
      url: SIGN_IN,
      payload: payload as Record<string, unknown>,
      headers,
      ...(remoteAddress ? { remoteAddress } : {}),
    });

  it('gives a loopback client a short-lived token that the API takes, for the user and accounts named', async () => {
    const { app } = await appWith();
    const response = await signIn(app, { user: 'ada', accounts: ['acme', 'beta'] });
    expect(response.statusCode).toBe(200);
    expect(response.headers['cache-control']).toBe('no-store');
    expect(response.headers['ratelimit-limit']).toBeDefined();
    const body = response.json();
    expect(body).toEqual({
      accessToken: expect.any(String),
      tokenType: 'Bearer',
      expiresAt: expect.any(String),
    });
    const token = claims(body.accessToken);
    expect(token).toMatchObject({ sub: 'ada', accounts: ['acme', 'beta'] });
    // An hour by default.
    expect((token.exp as number) - (token.iat as number)).toBe(3600);
    expect(Date.parse(body.expiresAt)).toBe((token.exp as number) * 1000);
    const me = await app.inject({
      url: '/v3/identity/me',
      headers: { authorization: `Bearer ${body.accessToken}` },
    });
    expect(me.statusCode).toBe(200);
    expect(me.json().user).toEqual({ id: 'ada' });
  });

  it('takes a shorter life, never a longer one than an hour or PLAYBOOK_JWT_MAX_TTL_S', async () => {
    const { app } = await appWith({ PLAYBOOK_JWT_MAX_TTL_S: '120' });
    const short = claims(
      (await signIn(app, { user: 'ada', accounts: ['acme'], ttlSeconds: 5 })).json().accessToken,
    );
    expect((short.exp as number) - (short.iat as number)).toBe(5);
    const capped = claims((await signIn(app, { user: 'ada', accounts: ['acme'] })).json().accessToken);
    expect((capped.exp as number) - (capped.iat as number)).toBe(120);
    const tooLong = await signIn(app, { user: 'ada', accounts: ['acme'], ttlSeconds: 3601 });
    expect(tooLong.statusCode).toBe(400);
    expect(tooLong.json().errors).toEqual([expect.objectContaining({ in: 'body', name: 'ttlSeconds' })]);
  });

  it('refuses a client that is not on this machine (403), judged after PLAYBOOK_TRUST_PROXY', async () => {
    const { app } = await appWith();
    const remote = await signIn(app, { user: 'ada', accounts: ['acme'] }, '203.0.113.7');
    expect(remote.statusCode).toBe(403);
    expect(remote.json()).toMatchObject({ code: 'forbidden' });
    expect(remote.body).not.toContain('accessToken');
    // Without a trusted proxy, a forwarded address is the caller's word and changes nothing.
    const forwarded = await signIn(app, { user: 'ada', accounts: ['acme'] }, '203.0.113.7', {
      'x-forwarded-for': '127.0.0.1',
    });
    expect(forwarded.statusCode).toBe(403);

    const behindProxy = (await appWith({ PLAYBOOK_TRUST_PROXY: '127.0.0.1' })).app;
    const proxied = await signIn(behindProxy, { user: 'ada', accounts: ['acme'] }, '127.0.0.1', {
      'x-forwarded-for': '198.51.100.4',
    });
    expect(proxied.statusCode).toBe(403);
    const local = await signIn(behindProxy, { user: 'ada', accounts: ['acme'] }, '127.0.0.1', {
      'x-forwarded-for': '::1',
    });
    expect(local.statusCode).toBe(200);
  });

  it('answers every client with PLAYBOOK_DEV_SIGN_IN=true', async () => {
    const { app } = await appWith({ PLAYBOOK_DEV_SIGN_IN: 'true' });
    const remote = await signIn(app, { user: 'ada', accounts: ['acme'] }, '203.0.113.7');
    expect(remote.statusCode).toBe(200);
  });

  it('names each bad field (400): a blank user, no account, an account id that is not one, an unknown field', async () => {
    const { app } = await appWith();
    const cases: [unknown, string][] = [
      [{ user: ' ', accounts: ['acme'] }, 'user'],
      [{ user: 'ada', accounts: [] }, 'accounts'],
      [{ user: 'ada', accounts: ['svc'] }, 'accounts[0]'],
      [{ user: 'ada', accounts: ['acme'], scope: 'all' }, 'scope'],
    ];
    for (const [payload, field] of cases) {
      const response = await signIn(app, payload);
      expect(response.statusCode, JSON.stringify(payload)).toBe(400);
      expect(response.json().errors.map((error: { name: string }) => error.name)).toContain(field);
    }
  });

  it('does not exist where tokens come from an identity provider, nor in a live deployment', async () => {
    for (const env of [{ PLAYBOOK_JWKS_URL: 'https://id.example.test/.well-known/jwks.json' }, liveEnv()]) {
      const { app } = await appWith(env);
      expect((await signIn(app, { user: 'ada', accounts: ['acme'] })).statusCode).toBe(404);
      const document = (await app.inject({ url: '/v3/openapi.json' })).json();
      expect(document.paths[SIGN_IN]).toBeUndefined();
    }
  });
});

describe('isLoopbackAddress (D33)', () => {
  it('is 127.0.0.0/8 and ::1, IPv4-mapped addresses judged as the IPv4 they carry', () => {
    for (const address of ['127.0.0.1', '127.8.9.10', '::1', '::ffff:127.0.0.1']) {
      expect(isLoopbackAddress(address), address).toBe(true);
    }
    for (const address of [
      '10.0.0.1',
      '192.168.1.1',
      '::ffff:10.0.0.1',
      'fe80::1',
      '0.0.0.0',
      '',
      'localhost',
    ]) {
      expect(isLoopbackAddress(address), address).toBe(false);
    }
  });
});
