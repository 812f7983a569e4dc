import fs from 'node:fs/promises';
import path from 'node:path';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEMO_CATALOGS_DIR, importDemoContentIfEmpty } from '../../src/composition/demo.js';
import { createServices } from '../../src/composition/services.js';
import { loadConfig } from '../../src/foundation/config.js';
import { buildTestApp, PrincipalRegistry } from '../helpers/app.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { catalogJson, dumpStorage, newTreeDir, runImport, sha256, writeTree } from './support.js';

/** The shipped demo tree must always import cleanly, so that it cannot rot unnoticed. */
describe('the demo catalogs', () => {
  let backend: TestBackend;
  beforeAll(async () => {
    backend = await createTestBackend();
  });
  afterAll(async () => {
    await backend.cleanup();
  });

  it('live in demo/catalogs at the package root', async () => {
    expect(DEMO_CATALOGS_DIR).toBe(path.resolve(import.meta.dirname, '../../demo/catalogs') + path.sep);
    expect((await fs.stat(DEMO_CATALOGS_DIR)).isDirectory()).toBe(true);
  });

  it('import cleanly as service-owned content, then re-import without a change', async () => {
    const report = await runImport(backend, DEMO_CATALOGS_DIR);
    expect(report.counts).toMatchObject({
      catalogsCreated: 4,
      catalogVersionsPublished: 4,
      resourcesCreated: report.counts.resourceFilesRead,
      objectsStored: 1,
    });
    expect(report.counts.resourcesCreated).toBeGreaterThanOrEqual(15);
    const before = await dumpStorage(backend);
    const again = await runImport(backend, DEMO_CATALOGS_DIR);
    expect(again.changed).toBe(false);
    expect(await dumpStorage(backend)).toEqual(before);
  });

  it('cover what a newcomer should see: object storage, a plan-gated resource, a draft, several kinds and facets', async () => {
    const db = backend.databases.primary;
    const rows = await db
      .selectFrom('resources as r')
      .innerJoin('resource_versions as v', 'v.id', 'r.current_version_id')
      .innerJoin('catalogs as c', 'c.id', 'r.catalog_id')
      .select([
        'c.slug as catalog',
        'r.slug',
        'r.kind',
        'r.status',
        'r.facets',
        'v.status as versionStatus',
        'v.storage_backend',
        'v.content_size_bytes',
        'v.media_type',
        'v.content_hash',
      ])
      .execute();

    const large = rows.filter((row) => row.storage_backend === 'object-storage');
    expect(large.map((row) => row.slug)).toEqual(['integration-error-catalogue']);
    expect(large[0]!.content_size_bytes).toBeGreaterThan(65_536);

    const gated = rows.filter((row) => JSON.parse(row.facets ?? '{}').planAccess?.includes('pro'));
    expect(gated.map((row) => row.slug)).toEqual(['sso-setup-guide']);

    const drafts = rows.filter((row) => row.status === 'draft');
    expect(drafts.map((row) => [row.slug, row.versionStatus])).toEqual([
      ['dependency-upgrade-policy', 'draft'],
    ]);

    expect(new Set(rows.map((row) => row.kind)).size).toBeGreaterThanOrEqual(6);
    expect(new Set(rows.map((row) => row.media_type))).toEqual(
      new Set(['text/markdown', 'application/json']),
    );

    const catalogs = await db.selectFrom('catalogs').selectAll().orderBy('slug').execute();
    expect(catalogs.map((c) => c.slug)).toEqual([
      'api-design',
      'engineering-handbook',
      'incident-response',
      'integrations',
    ]);
    const facetKeys = new Set(catalogs.flatMap((c) => Object.keys(JSON.parse(c.facets ?? '{}'))));
    expect(facetKeys).toEqual(new Set(['capability', 'channel', 'framework', 'technology']));
  });

  it('hold JSON content that is valid JSON, and content that matches its hash', async () => {
    const versions = await backend.databases.primary.selectFrom('resource_versions').selectAll().execute();
    for (const version of versions) {
      const content = await backend.content.read(
        version.storage_backend as 'database-text' | 'object-storage',
        version.content_hash,
      );
      expect(sha256(content)).toBe(version.content_hash);
      if (version.media_type === 'application/json') expect(() => JSON.parse(content)).not.toThrow();
    }
  });

  it('are served through the API: lists, large content, plan gating, hidden drafts', async () => {
    const principals = new PrincipalRegistry();
    const app = await buildTestApp(backend, principals);
    try {
      const free = await principals.register();
      const pro = await principals.register({ accountId: 'acme', plan: 'pro' });
      const catalogs = await app.inject({ url: '/v3/playbook/catalogs', headers: free });
      expect(catalogs.statusCode).toBe(200);
      expect(catalogs.json().meta.total).toBe(4);

      const list = await app.inject({
        url: '/v3/playbook/catalogs/svc/integrations/resources',
        headers: free,
      });
      const items = list.json().data as { slug: string; id: string }[];
      const byslug = new Map(items.map((item) => [item.slug, item.id]));
      const catalogue = await app.inject({
        url: `/v3/playbook/resources/${byslug.get('integration-error-catalogue')}`,
        headers: free,
      });
      expect(catalogue.statusCode).toBe(200);
      const expected = await fs.readFile(
        path.join(DEMO_CATALOGS_DIR, 'integrations/resources/files/integration-error-catalogue.json'),
        'utf8',
      );
      expect(catalogue.json().currentVersion).toMatchObject({
        storageBackend: 'object-storage',
        content: expected,
      });

      const sso = `/v3/playbook/resources/${byslug.get('sso-setup-guide')}`;
      expect((await app.inject({ url: sso, headers: free })).statusCode).toBe(403);
      expect((await app.inject({ url: sso, headers: pro })).statusCode).toBe(200);

      const handbook = await app.inject({
        url: '/v3/playbook/catalogs/svc/engineering-handbook/resources?pageSize=100',
        headers: free,
      });
      const slugs = (handbook.json().data as { slug: string }[]).map((item) => item.slug);
      expect(slugs).not.toContain('dependency-upgrade-policy');
    } finally {
      await app.close();
    }
  });
});

describe('importDemoContentIfEmpty', () => {
  let backend: TestBackend;
  beforeAll(async () => {
    backend = await createTestBackend();
  });
  afterAll(async () => {
    await backend.cleanup();
  });

  function capturingLogger() {
    const lines: Record<string, unknown>[] = [];
    const logger = pino({ level: 'info' }, { write: (line: string) => lines.push(JSON.parse(line)) });
    return { logger, lines };
  }

  it('imports the demo once on an empty service namespace and logs one line with counts', async () => {
    const services = createServices(loadConfig(backend.env), pino({ level: 'silent' }));
    try {
      const first = capturingLogger();
      await importDemoContentIfEmpty(services, first.logger);
      expect(first.lines).toHaveLength(1);
      expect(first.lines[0]).toMatchObject({ msg: 'imported the demo catalogs', catalogs: 4, objects: 1 });
      expect(first.lines[0]!.resources).toBeGreaterThanOrEqual(15);

      const before = await dumpStorage(backend);
      const second = capturingLogger();
      await importDemoContentIfEmpty(services, second.logger);
      expect(second.lines).toEqual([]);
      expect(await dumpStorage(backend)).toEqual(before);
    } finally {
      await services.close();
    }
  });

  it('imports once when two instances start together on an empty database', async () => {
    const own = await createTestBackend();
    const first = createServices(loadConfig(own.env), pino({ level: 'silent' }));
    const second = createServices(loadConfig(own.env), pino({ level: 'silent' }));
    try {
      const logs = [capturingLogger(), capturingLogger()];
      await Promise.all([
        importDemoContentIfEmpty(first, logs[0]!.logger),
        importDemoContentIfEmpty(second, logs[1]!.logger),
      ]);
      expect(logs.flatMap((log) => log.lines)).toHaveLength(1);
      const catalogs = await own.databases.primary.selectFrom('catalogs').select('slug').execute();
      expect(catalogs).toHaveLength(4);
    } finally {
      await first.close();
      await second.close();
      await own.cleanup();
    }
  });

  it('leaves a deployment that imported its own service content alone', async () => {
    const own = await createTestBackend();
    const services = createServices(loadConfig(own.env), pino({ level: 'silent' }));
    try {
      const dir = await writeTree(await newTreeDir(own), {
        'ours/catalog.json': catalogJson({ name: 'Ours' }),
      });
      await runImport(own, dir);
      const { logger, lines } = capturingLogger();
      await importDemoContentIfEmpty(services, logger);
      expect(lines).toEqual([]);
      const slugs = await own.databases.primary.selectFrom('catalogs').select('slug').execute();
      expect(slugs).toEqual([{ slug: 'ours' }]);
    } finally {
      await services.close();
      await own.cleanup();
    }
  });
});
