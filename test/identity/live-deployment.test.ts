import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEV_KEY_FILE } from '../../src/auth/dev-signer.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { runCli, spawnCli } from '../helpers/cli.js';
import { JwksServer, liveEnv, type SigningKey, sign, signingKey } from '../helpers/jwks.js';
import { type Certificate, selfSignedCertificate } from '../helpers/tls.js';

/**
 * D9 amended: a `live` deployment never signs its own access tokens. It refuses to start without an
 * https key set, an issuer and an audience; `playbook token` refuses in it; with them, it verifies
 * the identity provider's tokens, and the operator commands run as before. On SQLite in the embedded
 * project, on PostgreSQL in the production one, with `serve` started as a process of its own.
 */
describe('a live deployment never mints its own tokens (D9)', () => {
  let backend: TestBackend;
  let certificate: Certificate;
  let jwks: JwksServer;
  let jwksUrl: string;
  let providerKey: SigningKey;

  beforeAll(async () => {
    backend = await createTestBackend();
    certificate = await selfSignedCertificate(path.join(backend.workDir, 'tls'));
    jwks = new JwksServer(certificate);
    jwksUrl = await jwks.start();
    providerKey = await signingKey('provider-1', 'ES256');
    jwks.keys = [providerKey.publicJwk];
  });
  afterAll(async () => {
    await jwks.stop();
    await backend.cleanup();
  });

  /** A live deployment's whole configuration on the test backend, its key set trusted as a process's. */
  const live = (overrides: Record<string, string> = {}): Record<string, string> => ({
    ...backend.env,
    ...liveEnv(jwksUrl),
    ...overrides,
  });
  const withoutVariable = (name: string, env: Record<string, string>): Record<string, string> =>
    Object.fromEntries(Object.entries(env).filter(([variable]) => variable !== name));
  const devKeyFile = () => path.join(backend.workDir, DEV_KEY_FILE);

  /** `playbook serve` as a process: how it ended, or that it began to serve (and was stopped then). */
  async function serveUntilItEndsOrServes(env: Record<string, string>) {
    const started = spawnCli(['serve', '--port', '0'], env);
    const served = await Promise.race([
      started.exited.then(() => false),
      started
        .waitForStderr((text) => text.includes('is serving on'), 60_000)
        .then(
          () => true,
          () => false,
        ),
    ]);
    if (started.child.exitCode === null) started.child.kill('SIGTERM');
    const { code } = await started.exited;
    return { served, code, stdout: started.stdout(), stderr: started.stderr() };
  }

  it('serve refuses to start without an https key set, an issuer and an audience, naming each', async () => {
    const cases: [Record<string, string>, RegExp][] = [
      [
        withoutVariable('PLAYBOOK_JWKS_URL', live()),
        /^playbook: PLAYBOOK_JWKS_URL is required with PLAYBOOK_ENVIRONMENT=live: .*never signs its own\n$/,
      ],
      [
        live({ PLAYBOOK_JWKS_URL: jwksUrl.replace('https:', 'http:') }),
        /^playbook: PLAYBOOK_JWKS_URL="http:\/\/127\.0\.0\.1:\d+\/\.well-known\/jwks\.json" is not valid with PLAYBOOK_ENVIRONMENT=live: expected an https:\/\/ URL/,
      ],
      [
        withoutVariable('PLAYBOOK_JWT_ISSUER', live()),
        /^playbook: PLAYBOOK_JWT_ISSUER is required with PLAYBOOK_ENVIRONMENT=live/,
      ],
      [
        withoutVariable('PLAYBOOK_JWT_AUDIENCE', live()),
        /^playbook: PLAYBOOK_JWT_AUDIENCE is required with PLAYBOOK_ENVIRONMENT=live/,
      ],
    ];
    const ended = await Promise.all(cases.map(([env]) => serveUntilItEndsOrServes(env)));
    for (const [index, [, message]] of cases.entries()) {
      expect(ended[index], String(message)).toMatchObject({ served: false, code: 1, stdout: '' });
      expect(ended[index]!.stderr, String(message)).toMatch(message);
    }
    // Stopped before anything was opened: no signing key was made on the way.
    expect(fs.existsSync(devKeyFile())).toBe(false);
  }, 90_000);

  it('playbook token refuses in live, as bad usage, whatever else is configured, and mints nothing', async () => {
    for (const env of [live(), withoutVariable('PLAYBOOK_JWKS_URL', live())]) {
      const result = await runCli(['token', '--user', 'mallory', '--account', 'acme'], env);
      expect(result.code).toBe(2);
      expect(result.stdout).toBe('');
      expect(result.stderr).toMatch(
        /^error: playbook token does not run with PLAYBOOK_ENVIRONMENT=live: a live deployment accepts only access tokens from its identity provider \(PLAYBOOK_JWKS_URL\)\n/,
      );
    }
    expect(fs.existsSync(devKeyFile())).toBe(false);
  });

  it('operator commands run on storage with a live configuration', async () => {
    expect(await runCli(['migrate'], live())).toMatchObject({ code: 0 });
    expect(await runCli(['accounts', 'set', 'acme', '--plan', 'pro'], live())).toMatchObject({ code: 0 });
    const created = await runCli(
      ['keys', 'create', '--account', 'acme', '--name', 'ops', '--scope', 'playbook:read'],
      live(),
    );
    expect(created.code).toBe(0);
    expect(created.stdout).toMatch(/^svc_sk_live_[A-Za-z0-9]+_[A-Za-z0-9]+\n$/);
    const listed = await runCli(['keys', 'list', '--account', 'acme'], live());
    expect(listed.code).toBe(0);
    expect(listed.stdout).toMatch(/\tactive\tlive\tplaybook:read\t/);
    // Nothing an operator runs fetches the key set or makes a signer.
    expect(jwks.fetches).toBe(0);
    expect(fs.existsSync(devKeyFile())).toBe(false);
  });

  it('serves with the identity provider’s https key set: its tokens act, and no other does', async () => {
    const served = spawnCli(['serve', '--port', '0'], {
      ...live(),
      // The test's certificate authority, trusted by this process alone.
      NODE_EXTRA_CA_CERTS: certificate.certFile,
    });
    try {
      const banner = await served.waitForStderr(
        (text) => text.includes('Access tokens are verified with'),
        30_000,
      );
      const address = /is serving on (http:\/\/[\d.:]+)/.exec(banner)![1]!;
      expect(banner).toContain(`Access tokens are verified with ${jwksUrl}`);

      const token = await sign(providerKey, { sub: 'ada', accounts: ['acme'] });
      const creation = await fetch(`${address}/v3/identity/api-keys`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        body: JSON.stringify({ name: 'from the provider', accountId: 'acme', scopes: ['playbook:read'] }),
      });
      expect(creation.status).toBe(201);
      const { key } = (await creation.json()) as { key: string };
      expect(key).toMatch(/^svc_sk_live_/);
      expect(jwks.fetches).toBeGreaterThan(0);
      const read = await fetch(`${address}/v3/playbook/catalogs`, { headers: { 'x-api-key': key } });
      expect(read.status).toBe(200);

      // A token of the development signer, made for this very data directory by a test deployment's
      // `playbook token`, is nobody's in live: the deployment has no signer to check it with.
      const minted = await runCli(['token', '--user', 'mallory', '--account', 'acme'], {
        ...backend.env,
        PLAYBOOK_ENVIRONMENT: 'test',
      });
      expect(minted.code).toBe(0);
      const forged = await fetch(`${address}/v3/identity/api-keys?accountId=acme`, {
        headers: { authorization: `Bearer ${minted.stdout.trim()}` },
      });
      expect(forged.status).toBe(401);
      const stranger = await sign(await signingKey('provider-1', 'ES256'), {
        sub: 'mallory',
        accounts: ['acme'],
      });
      const refused = await fetch(`${address}/v3/identity/api-keys?accountId=acme`, {
        headers: { authorization: `Bearer ${stranger}` },
      });
      expect(refused.status).toBe(401);
    } finally {
      served.child.kill('SIGTERM');
      await served.exited;
    }
  }, 60_000);
});
