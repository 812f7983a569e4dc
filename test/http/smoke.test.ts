import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildTestApp, PrincipalRegistry } from '../helpers/app.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { givenCatalog, givenResource } from '../helpers/fixtures.js';

describe('smoke', () => {
  let backend: TestBackend;
  let app: FastifyInstance;
  const principals = new PrincipalRegistry();

  beforeAll(async () => {
    backend = await createTestBackend();
    app = await buildTestApp(backend, principals);
    const catalog = await givenCatalog(backend.databases.primary, { slug: 'handbook' });
    await givenResource(backend, catalog, { slug: 'onboarding' });
  });
  afterAll(async () => {
    await app.close();
    await backend.cleanup();
  });

  it('lists service catalogs and reads a resource with content', async () => {
    const headers = await principals.register();
    const list = await app.inject({ url: '/v3/playbook/catalogs', headers });
    expect(list.statusCode).toBe(200);
    expect(list.json().data[0].humanRef).toBe('svc/handbook');
    const resources = await app.inject({ url: '/v3/playbook/catalogs/svc/handbook/resources', headers });
    expect(resources.statusCode).toBe(200);
    const item = resources.json().data[0];
    expect(item.currentVersion.content).toBeUndefined();
    const detail = await app.inject({ url: `/v3/playbook/resources/${item.id}`, headers });
    expect(detail.statusCode).toBe(200);
    expect(detail.json().currentVersion.content).toBe('# onboarding\n');
  });
});
