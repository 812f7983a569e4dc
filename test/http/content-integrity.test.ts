import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildTestApp, PrincipalRegistry } from '../helpers/app.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { checkProblem } from '../helpers/contract.js';
import {
  type GivenResource,
  givenCatalog,
  givenResource,
  storageLocations,
  tamperDatabaseText,
  tamperObject,
} from '../helpers/fixtures.js';

/**
 * D12: content is checked against its hash when loaded and never served when it does not match; and
 * storage locations (the content directory, object keys, table names) never leave the service.
 */

describe('content integrity (D12) and storage locations', () => {
  let backend: TestBackend;
  let app: FastifyInstance;
  const principals = new PrincipalRegistry();
  let headers: Record<string, string>;
  let fileTampered: GivenResource;
  let rowTampered: GivenResource;
  let fileMissing: GivenResource;
  let versionTampered: GivenResource;
  let intact: GivenResource;

  beforeAll(async () => {
    backend = await createTestBackend();
    app = await buildTestApp(backend, principals);
    headers = await principals.register({ accountId: null, scopes: ['playbook:read'] });
    const db = backend.databases.primary;
    const handbook = await givenCatalog(db, { slug: 'handbook' });
    fileTampered = await givenResource(backend, handbook, {
      slug: 'file-tampered',
      versions: [{ version: '1', content: 'ORIGINAL file content', storage: 'object-storage' }],
    });
    rowTampered = await givenResource(backend, handbook, {
      slug: 'row-tampered',
      versions: [{ version: '1', content: 'ORIGINAL row content', storage: 'database-text' }],
    });
    fileMissing = await givenResource(backend, handbook, {
      slug: 'file-missing',
      versions: [{ version: '1', content: 'ORIGINAL lost content', storage: 'object-storage' }],
    });
    versionTampered = await givenResource(backend, handbook, {
      slug: 'old-version-tampered',
      versions: [
        { version: '1', content: 'ORIGINAL old content', storage: 'object-storage' },
        { version: '2', content: 'current content' },
      ],
    });
    intact = await givenResource(backend, handbook, {
      slug: 'intact',
      versions: [{ version: '1', content: 'intact content', storage: 'object-storage' }],
    });

    // Tampered before any read, so that no verified copy sits in the reader's memory.
    await tamperObject(backend, fileTampered.versions[0]!.contentHash, 'TAMPERED file content');
    await tamperDatabaseText(backend, rowTampered.versions[0]!.contentHash, 'TAMPERED row content');
    await tamperObject(backend, fileMissing.versions[0]!.contentHash, null);
    await tamperObject(backend, versionTampered.versions[0]!.contentHash, 'TAMPERED old content');
  });
  afterAll(async () => {
    await app.close();
    await backend.cleanup();
  });

  const get = (url: string) => app.inject({ url, headers });

  function expectInternal(res: LightMyRequestResponse) {
    expect(checkProblem(res, 500, 'internal'), res.body).toEqual([]);
    expect(res.body).not.toMatch(/TAMPERED|ORIGINAL/);
    for (const location of storageLocations(backend, [])) expect(res.body).not.toContain(location);
    expect(res.body).not.toMatch(/content_blobs|select |\bat \S+:\d+/i);
    expect(res.headers.etag).toBeUndefined();
    expect(res.headers['cache-control']).toBe('no-store');
  }

  it('D12: object-storage content changed in the store is a 500 internal on the detail and the version', async () => {
    expectInternal(await get(`/v3/playbook/resources/${fileTampered.id}`));
    expectInternal(
      await get(`/v3/playbook/resources/${fileTampered.id}/versions/${fileTampered.currentVersionId}`),
    );
  });

  it('D12: database-text content changed in content_blobs is a 500 internal', async () => {
    expectInternal(await get(`/v3/playbook/resources/${rowTampered.id}`));
    expectInternal(
      await get(`/v3/playbook/resources/${rowTampered.id}/versions/${rowTampered.currentVersionId}`),
    );
  });

  it('D12: content missing from the store is a 500 internal, not a 404 and not an empty string', async () => {
    expectInternal(await get(`/v3/playbook/resources/${fileMissing.id}`));
  });

  it('D12: a tampered superseded version fails alone; the current one is still served', async () => {
    expectInternal(
      await get(`/v3/playbook/resources/${versionTampered.id}/versions/${versionTampered.versionIds[0]}`),
    );
    const current = await get(`/v3/playbook/resources/${versionTampered.id}`);
    expect(current.statusCode).toBe(200);
    expect(current.json().currentVersion.content).toBe('current content');
  });

  it('D12: tampered content stays refused on every later read', async () => {
    for (let i = 0; i < 3; i++) expectInternal(await get(`/v3/playbook/resources/${fileTampered.id}`));
  });

  it('D12: lists never load content, so they still answer while content is damaged', async () => {
    const res = await get('/v3/playbook/catalogs/svc/handbook/resources');
    expect(res.statusCode).toBe(200);
    expect(res.body).not.toMatch(/TAMPERED|ORIGINAL/);
  });

  it('no answer names the content directory, an object key or a table', async () => {
    const urls = [
      '/v3/playbook/catalogs',
      '/v3/playbook/catalogs/svc/handbook/resources',
      `/v3/playbook/resources/${intact.id}`,
      `/v3/playbook/resources/${intact.id}/versions`,
      `/v3/playbook/resources/${intact.id}/versions/${intact.currentVersionId}`,
      `/v3/playbook/resources/${fileTampered.id}`,
      `/v3/playbook/resources/${fileMissing.id}`,
      '/v3/playbook/resources/0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b',
      '/v3/openapi.json',
      '/v3/no-such-route',
    ];
    const hashes = [intact, fileTampered, fileMissing].map((r) => r.versions[0]!.contentHash);
    const locations = storageLocations(backend, hashes);
    for (const url of urls) {
      const res = await get(url);
      const everything = `${JSON.stringify(res.headers)}\n${res.body}`;
      for (const location of locations) expect(everything, url).not.toContain(location);
      expect(everything, url).not.toMatch(/content_blobs|resource_versions|storage_?key|\.sqlite|s3:\/\//i);
    }
  });
});
