import { createHash } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildTestApp, PrincipalRegistry } from '../helpers/app.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import {
  checkCatalog,
  checkPage,
  checkResourceDetail,
  checkResourceListItem,
  checkVersionDetail,
  checkVersionSummary,
} from '../helpers/contract.js';
import {
  type GivenResource,
  givenAccount,
  givenCatalog,
  givenCatalogVersion,
  givenResource,
} from '../helpers/fixtures.js';

/** Happy paths of the four read operations and the D16 history list, each answer checked field by field. */

const sha256 = (text: string) => createHash('sha256').update(text, 'utf8').digest('hex');

describe('reads: happy paths and answer shapes', () => {
  let backend: TestBackend;
  let app: FastifyInstance;
  const principals = new PrincipalRegistry();
  let headers: Record<string, string>;
  let onboarding: GivenResource;
  let bigGuide: GivenResource;
  let accountRunbook: GivenResource;
  let bare: GivenResource;
  const multiByte = '# Grüße\n\nCafé — naïve ✓ 🚀\n';
  const large = `# Big guide\n\n${'Lorem ipsum dolor sit amet. '.repeat(4000)}`;

  beforeAll(async () => {
    backend = await createTestBackend();
    app = await buildTestApp(backend, principals);
    const db = backend.databases.primary;
    await givenAccount(db, 'acme', 'team');
    headers = await principals.register({ accountId: 'acme', plan: 'team', scopes: ['playbook:read'] });

    const handbook = await givenCatalog(db, {
      slug: 'handbook',
      name: 'Engineering handbook',
      description: 'How we build things.',
      facets: { capability: ['onboarding', 'delivery'], technology: ['typescript'] },
    });
    onboarding = await givenResource(backend, handbook, {
      slug: 'onboarding',
      kind: 'workflow',
      title: 'Onboarding',
      description: 'The first week.',
      facets: { channel: ['web'], framework: ['fastify'] },
      manifest: { audience: 'new-joiners', steps: 5, nested: { ok: true } },
      versions: [
        { version: '1.0.0', content: '# Onboarding v1\n', manifest: { audience: 'everyone' } },
        { version: '1.1.0', content: multiByte, manifest: { audience: 'new-joiners', steps: 5 } },
      ],
    });
    bigGuide = await givenResource(backend, handbook, {
      slug: 'big-guide',
      kind: 'reference',
      versions: [
        { version: '2024.1', content: large, storage: 'object-storage', mediaType: 'text/markdown' },
      ],
    });
    await givenCatalogVersion(db, handbook, '1.0.0', [bigGuide, onboarding]);

    await givenCatalog(db, { slug: 'legacy', status: 'archived' });

    const internal = await givenCatalog(db, { accountId: 'acme', slug: 'internal', name: 'Internal' });
    accountRunbook = await givenResource(backend, internal, {
      slug: 'runbook',
      kind: 'policy',
      versions: [{ version: 'v1', content: '{"a":1}', mediaType: 'application/json' }],
    });
    bare = await givenResource(backend, internal, { slug: 'no-current', withCurrent: false });
  });
  afterAll(async () => {
    await app.close();
    await backend.cleanup();
  });

  it('GET /v3/playbook/catalogs answers the visible Catalogs in the envelope, every field per contract', async () => {
    const res = await app.inject({ url: '/v3/playbook/catalogs', headers });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toMatch(/^application\/json/);
    const body = res.json();
    expect(checkPage(body, checkCatalog)).toEqual([]);
    expect(body.meta).toEqual({ page: 1, pageSize: 20, pageCount: 1, total: 3 });
    expect(body.data.map((c: { humanRef: string }) => c.humanRef)).toEqual([
      'svc/handbook',
      'svc/legacy',
      'org/internal',
    ]);

    const [handbook, legacy, internal] = body.data;
    expect(handbook).toMatchObject({
      sourceScope: 'svc',
      owner: 'svc',
      slug: 'handbook',
      name: 'Engineering handbook',
      status: 'active',
      description: 'How we build things.',
      facets: { capability: ['onboarding', 'delivery'], technology: ['typescript'] },
    });
    expect(handbook).not.toHaveProperty('archivedAt');
    expect(legacy.status).toBe('archived');
    expect(legacy).toHaveProperty('archivedAt');
    // Optional fields with no value are absent, never null.
    for (const key of ['description', 'facets', 'currentVersion']) expect(legacy).not.toHaveProperty(key);
    expect(internal).toMatchObject({ sourceScope: 'account', owner: 'org', slug: 'internal' });
  });

  it('a Catalog carries its current version with pins, resourceCount and manifestHash', async () => {
    const res = await app.inject({ url: '/v3/playbook/catalogs', headers });
    const handbook = res.json().data[0];
    expect(handbook.currentVersion).toMatchObject({ version: '1.0.0', resourceCount: 2 });
    expect(handbook.currentVersion.resourcePins).toEqual([
      {
        resourceId: bigGuide.id,
        resourceHumanRef: 'svc/handbook/big-guide',
        resourceVersionId: bigGuide.currentVersionId,
        version: '2024.1',
        contentHash: sha256(large),
      },
      {
        resourceId: onboarding.id,
        resourceHumanRef: 'svc/handbook/onboarding',
        resourceVersionId: onboarding.currentVersionId,
        version: '1.1.0',
        contentHash: sha256(multiByte),
      },
    ]);
  });

  it('GET /v3/playbook/catalogs/{owner}/{catalogSlug}/resources lists Resources by slug without manifest/content in currentVersion', async () => {
    const res = await app.inject({ url: '/v3/playbook/catalogs/svc/handbook/resources', headers });
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(checkPage(body, checkResourceListItem)).toEqual([]);
    expect(body.meta).toEqual({ page: 1, pageSize: 20, pageCount: 1, total: 2 });
    expect(body.data.map((r: { slug: string }) => r.slug)).toEqual(['big-guide', 'onboarding']);
    const item = body.data[1];
    expect(item).toMatchObject({
      id: onboarding.id,
      catalogHumanRef: 'svc/handbook',
      humanRef: 'svc/handbook/onboarding',
      sourceScope: 'svc',
      kind: 'workflow',
      title: 'Onboarding',
      description: 'The first week.',
      facets: { channel: ['web'], framework: ['fastify'] },
      manifest: { audience: 'new-joiners', steps: 5, nested: { ok: true } },
    });
    expect(item.currentVersion).toMatchObject({ id: onboarding.currentVersionId, status: 'published' });
    expect(item.currentVersion).not.toHaveProperty('manifest');
    expect(item.currentVersion).not.toHaveProperty('content');
  });

  it('org/<slug> lists the caller account Catalog; a Resource with no current version has no currentVersion', async () => {
    const res = await app.inject({ url: '/v3/playbook/catalogs/org/internal/resources', headers });
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(checkPage(body, checkResourceListItem)).toEqual([]);
    expect(body.data.map((r: { humanRef: string }) => r.humanRef)).toEqual([
      'org/internal/no-current',
      'org/internal/runbook',
    ]);
    expect(body.data[0]).not.toHaveProperty('currentVersion');
    expect(body.data[1]).toMatchObject({ sourceScope: 'account', catalogHumanRef: 'org/internal' });
  });

  it('GET /v3/playbook/resources/{resourceId} answers the detail with currentVersion, its manifest and content', async () => {
    const res = await app.inject({ url: `/v3/playbook/resources/${onboarding.id}`, headers });
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(checkResourceDetail(body, 'resource')).toEqual([]);
    expect(body.currentVersion).toMatchObject({
      id: onboarding.currentVersionId,
      version: '1.1.0',
      status: 'published',
      mediaType: 'text/markdown',
      storageBackend: 'database-text',
      manifest: { audience: 'new-joiners', steps: 5 },
      content: multiByte,
    });
  });

  it('D12: contentHash is the SHA-256 hex of the UTF-8 bytes and contentSizeBytes their count', async () => {
    const res = await app.inject({ url: `/v3/playbook/resources/${onboarding.id}`, headers });
    const version = res.json().currentVersion;
    expect(version.contentHash).toBe(sha256(multiByte));
    expect(version.contentHash).toMatch(/^[0-9a-f]{64}$/);
    expect(version.contentSizeBytes).toBe(Buffer.byteLength(multiByte, 'utf8'));
    expect(version.contentSizeBytes).not.toBe(multiByte.length);
  });

  it('content kept in object storage is served whole, named only as storageBackend', async () => {
    const res = await app.inject({ url: `/v3/playbook/resources/${bigGuide.id}`, headers });
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(checkResourceDetail(body, 'resource')).toEqual([]);
    expect(body.currentVersion.storageBackend).toBe('object-storage');
    expect(body.currentVersion.content).toBe(large);
    expect(body.currentVersion.contentSizeBytes).toBe(Buffer.byteLength(large));
  });

  it('an account-owned Resource reads through its id', async () => {
    const res = await app.inject({ url: `/v3/playbook/resources/${accountRunbook.id}`, headers });
    expect(res.statusCode).toBe(200);
    expect(checkResourceDetail(res.json(), 'resource')).toEqual([]);
    expect(res.json()).toMatchObject({
      sourceScope: 'account',
      humanRef: 'org/internal/runbook',
      currentVersion: { mediaType: 'application/json', content: '{"a":1}' },
    });
  });

  it('a Resource with no current version has no detail to give: 404', async () => {
    const res = await app.inject({ url: `/v3/playbook/resources/${bare.id}`, headers });
    expect(res.statusCode).toBe(404);
  });

  it('GET /v3/playbook/resources/{resourceId}/versions/{versionId} answers every field of a superseded version', async () => {
    const [oldId] = onboarding.versionIds;
    const res = await app.inject({
      url: `/v3/playbook/resources/${onboarding.id}/versions/${oldId}`,
      headers,
    });
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(checkVersionDetail(body, 'version')).toEqual([]);
    expect(body).toMatchObject({
      id: oldId,
      version: '1.0.0',
      status: 'superseded',
      content: '# Onboarding v1\n',
      contentHash: sha256('# Onboarding v1\n'),
      manifest: { audience: 'everyone' },
    });
    expect(body).toHaveProperty('publishedAt');
    expect(body).toHaveProperty('supersededAt');
    expect(body).not.toHaveProperty('archivedAt');
  });

  it('the current version read by id equals the detail currentVersion', async () => {
    const detail = await app.inject({ url: `/v3/playbook/resources/${onboarding.id}`, headers });
    const version = await app.inject({
      url: `/v3/playbook/resources/${onboarding.id}/versions/${onboarding.currentVersionId}`,
      headers,
    });
    expect(version.statusCode).toBe(200);
    expect(version.json()).toEqual(detail.json().currentVersion);
  });

  it('D16: GET /v3/playbook/resources/{resourceId}/versions lists versions newest first, without manifest/content', async () => {
    const res = await app.inject({ url: `/v3/playbook/resources/${onboarding.id}/versions`, headers });
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(checkPage(body, checkVersionSummary)).toEqual([]);
    expect(body.meta).toEqual({ page: 1, pageSize: 20, pageCount: 1, total: 2 });
    expect(body.data.map((v: { id: string }) => v.id)).toEqual([...onboarding.versionIds].reverse());
    expect(body.data.map((v: { status: string }) => v.status)).toEqual(['published', 'superseded']);
  });

  it('D16: the history list pages like the other lists', async () => {
    const first = await app.inject({
      url: `/v3/playbook/resources/${onboarding.id}/versions?pageSize=1`,
      headers,
    });
    const second = await app.inject({
      url: `/v3/playbook/resources/${onboarding.id}/versions?pageSize=1&page=2`,
      headers,
    });
    expect(first.json().meta).toEqual({ page: 1, pageSize: 1, pageCount: 2, total: 2 });
    expect(second.json().meta).toEqual({ page: 2, pageSize: 1, pageCount: 2, total: 2 });
    expect([first.json().data[0].id, second.json().data[0].id]).toEqual([...onboarding.versionIds].reverse());
  });
});
