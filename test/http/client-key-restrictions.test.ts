import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Playbook, PlaybookError } from '../../clients/typescript/src/index.js';
import { listenLocally } from '../helpers/app.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { givenAccount, givenCatalog } from '../helpers/fixtures.js';

/** D32 through the TypeScript client: `apiKeys.get`, `apiKeys.update` and `apiKeys.usage`. */
describe('restricted keys through the client (D32)', () => {
  let backend: TestBackend;
  let identity: TestIdentity;
  let app: FastifyInstance;
  let baseUrl: string;
  let manager: Playbook;

  beforeAll(async () => {
    backend = await createTestBackend();
    identity = createTestIdentity(backend);
    app = await buildIdentityApp(backend, identity);
    baseUrl = await listenLocally(app);
    const db = backend.databases.primary;
    await givenAccount(db, 'acme', 'pro');
    await givenAccount(db, 'globex', 'pro');
    await givenCatalog(db, { slug: 'runbooks', accountId: 'acme' });
    await givenCatalog(db, { slug: 'handbook', accountId: 'acme' });
    const accessToken = await identity.mintToken({ user: 'ada', accounts: ['acme'] });
    manager = new Playbook({ accessToken, baseUrl, accountId: 'acme' });
  });
  afterAll(async () => {
    await app.close();
    await identity.close();
    await backend.cleanup();
  });

  it('creates a restricted key, reads it, changes and lifts its restrictions, and reads its usage', async () => {
    const created = await manager.apiKeys.create({
      name: 'ci',
      accountId: 'acme',
      scopes: ['playbook:read'],
      restrictions: { catalogs: ['org/runbooks'], rateLimit: { limit: 100, windowSeconds: 60 } },
    });
    expect(created.restrictions).toEqual({
      catalogs: ['org/runbooks'],
      allowedIps: null,
      rateLimit: { limit: 100, windowSeconds: 60 },
    });
    const reader = new Playbook({ apiKey: created.key, baseUrl });
    expect((await reader.catalogs.list()).data.map((catalog) => catalog.slug)).toEqual(['runbooks']);

    expect(await manager.apiKeys.get(created.id)).toMatchObject({ id: created.id, name: 'ci' });
    const changed = await manager.apiKeys.update(created.id, {
      name: 'ci-deploy',
      restrictions: { catalogs: ['org/*'], rateLimit: null },
    });
    expect(changed).toMatchObject({ name: 'ci-deploy', restrictions: { catalogs: ['org/*'] } });
    expect(changed.restrictions?.rateLimit).toBeNull();
    expect((await reader.catalogs.list()).data.map((catalog) => catalog.slug).sort()).toEqual([
      'handbook',
      'runbooks',
    ]);
    const lifted = await manager.apiKeys.update(created.id, { restrictions: null });
    expect(lifted.restrictions).toBeNull();

    const usage = await manager.apiKeys.usage(created.id, { granularity: 'hour' });
    expect(usage).toMatchObject({ keyId: created.id, granularity: 'hour' });
    expect(usage.buckets).toHaveLength(168);
    expect(usage.buckets.reduce((sum, bucket) => sum + bucket.success, 0)).toBe(2);
    expect(usage.lastUsed?.at).toEqual(expect.any(String));
    expect((await manager.apiKeys.usage(created.id)).granularity).toBe('day');
  });

  it('refusals are PlaybookErrors naming the field, the key or its state', async () => {
    const key = await manager.apiKeys.create({ name: 'x', accountId: 'acme', scopes: ['playbook:read'] });
    const bad = (await manager.apiKeys
      .update(key.id, { restrictions: { allowedIps: ['10.0.0.0/33'] } })
      .catch((error: unknown) => error)) as PlaybookError;
    expect(bad).toBeInstanceOf(PlaybookError);
    expect(bad).toMatchObject({ status: 400 });
    expect(bad.errors?.[0]?.name).toMatch(/allowedIps/);
    const other = await identity.mintKey({ accountId: 'globex' });
    for (const call of [
      () => manager.apiKeys.get(other.id),
      () => manager.apiKeys.update(other.id, { name: 'mine' }),
      () => manager.apiKeys.usage(other.id),
    ]) {
      expect(await call().catch((error: unknown) => error)).toMatchObject({ status: 404 });
    }
    await manager.apiKeys.revoke(key.id);
    expect(
      await manager.apiKeys.update(key.id, { name: 'again' }).catch((error: unknown) => error),
    ).toMatchObject({ status: 409, code: 'key_inactive' });
  });
});
