import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { readPinsText } from '../../src/catalog/stored-pins.js';
import type { ContentStore } from '../../src/content/content-store.js';
import type { Db } from '../../src/db/tables.js';
import { WriteContentionError } from '../../src/foundation/errors.js';
import { ImportValidationError, importTree } from '../../src/import/import-tree.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import {
  catalogJson,
  dumpStorage,
  newTreeDir,
  removeFromTree,
  resourceJson,
  runImport,
  sha256,
  sortedJson,
  T1,
  T2,
  T3,
  T4,
  UUID_V7,
  writeTree,
} from './support.js';

let backend: TestBackend;
let dir: string;
beforeEach(async () => {
  backend = await createTestBackend();
  dir = await newTreeDir(backend);
});
afterEach(async () => {
  await backend.cleanup();
});

const db = () => backend.databases.primary;

async function catalogRow(slug: string, accountId: string | null = null) {
  return db()
    .selectFrom('catalogs')
    .selectAll()
    .where('slug', '=', slug)
    .where('account_id', accountId === null ? 'is' : '=', accountId)
    .executeTakeFirstOrThrow();
}

async function resourceRow(catalogSlug: string, slug: string) {
  const catalog = await catalogRow(catalogSlug);
  return db()
    .selectFrom('resources')
    .selectAll()
    .where('catalog_id', '=', catalog.id)
    .where('slug', '=', slug)
    .executeTakeFirstOrThrow();
}

async function versionsOf(resourceId: string) {
  return db()
    .selectFrom('resource_versions')
    .selectAll()
    .where('resource_id', '=', resourceId)
    .orderBy('created_at')
    .orderBy('id')
    .execute();
}

async function catalogVersions(slug: string) {
  const catalog = await catalogRow(slug);
  return db()
    .selectFrom('catalog_versions')
    .selectAll()
    .where('catalog_id', '=', catalog.id)
    .orderBy('created_at')
    .orderBy('id')
    .execute();
}

/** A Catalog's current version row, with the JSON text of its pins (stored apart, in parts). */
async function currentCatalogVersion(slug: string) {
  const catalog = await catalogRow(slug);
  const row = await db()
    .selectFrom('catalog_versions')
    .selectAll()
    .where('id', '=', catalog.current_version_id)
    .executeTakeFirstOrThrow();
  return { ...row, pins: await readPinsText(db(), row.id) };
}

/** The pins D15 expects, worked out from the stored rows, independently of the importer. */
async function expectedPins(catalogSlug: string, owner = 'svc') {
  const catalog = await catalogRow(catalogSlug);
  const rows = await db()
    .selectFrom('resources as r')
    .innerJoin('resource_versions as v', 'v.id', 'r.current_version_id')
    .select(['r.id', 'r.slug', 'v.id as versionId', 'v.version', 'v.content_hash'])
    .where('r.catalog_id', '=', catalog.id)
    .where('r.status', '=', 'active')
    .execute();
  return rows
    .sort((a, b) => (a.slug < b.slug ? -1 : 1))
    .map((row) => ({
      resourceId: row.id,
      resourceHumanRef: `${owner}/${catalogSlug}/${row.slug}`,
      resourceVersionId: row.versionId,
      version: row.version,
      contentHash: row.content_hash,
    }));
}

async function expectRefused(promise: Promise<unknown>): Promise<string[]> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(ImportValidationError);
  return [...(error as ImportValidationError).problems];
}

describe('D15 first import', () => {
  it('creates catalogs, resources, published versions and a catalog version with pins', async () => {
    await writeTree(dir, {
      'handbook/catalog.json': catalogJson({
        description: 'How we work',
        facets: { capability: ['onboarding', 'code-review'], technology: ['typescript'] },
      }),
      'handbook/resources/onboarding.json': resourceJson({
        title: 'Onboarding',
        facets: { channel: ['docs'] },
        manifest: { audience: 'new-engineers', readingTimeMinutes: 12 },
        contentFile: 'files/onboarding.md',
        content: undefined,
      }),
      'handbook/resources/files/onboarding.md': '# Onboarding\n\nWelcome.\n',
      'handbook/resources/review.json': resourceJson({
        kind: 'policy',
        title: 'Review',
        content: 'Review it.',
      }),
    });
    const report = await runImport(backend, dir, { at: T1 });

    expect(report.changed).toBe(true);
    expect(report.counts).toMatchObject({
      catalogsCreated: 1,
      resourcesCreated: 2,
      resourceVersionsCreated: 2,
      catalogVersionsPublished: 1,
    });
    const catalog = await catalogRow('handbook');
    expect(catalog).toMatchObject({
      account_id: null,
      name: 'Engineering handbook',
      status: 'active',
      description: 'How we work',
      created_at: T1,
      updated_at: T1,
      archived_at: null,
    });
    expect(catalog.id).toMatch(UUID_V7);
    const facetRows = await db()
      .selectFrom('catalog_facet_values')
      .select(['facet', 'value'])
      .where('catalog_id', '=', catalog.id)
      .orderBy('facet')
      .orderBy('value')
      .execute();
    expect(facetRows).toEqual([
      { facet: 'capability', value: 'code-review' },
      { facet: 'capability', value: 'onboarding' },
      { facet: 'technology', value: 'typescript' },
    ]);

    const onboarding = await resourceRow('handbook', 'onboarding');
    expect(onboarding).toMatchObject({
      kind: 'document',
      title: 'Onboarding',
      status: 'active',
      created_at: T1,
      updated_at: T1,
      archived_at: null,
    });
    expect(JSON.parse(onboarding.manifest)).toEqual({ audience: 'new-engineers', readingTimeMinutes: 12 });
    expect(JSON.parse(onboarding.facets!)).toEqual({ channel: ['docs'] });
    const [version] = await versionsOf(onboarding.id);
    const content = '# Onboarding\n\nWelcome.\n';
    expect(version).toMatchObject({
      id: onboarding.current_version_id,
      version: '1.0.0',
      content_hash: sha256(content),
      content_size_bytes: Buffer.byteLength(content),
      media_type: 'text/markdown',
      storage_backend: 'database-text',
      status: 'published',
      published_at: T1,
      superseded_at: null,
      created_at: T1,
    });
    expect(version!.id).toMatch(UUID_V7);
    expect(JSON.parse(version!.manifest)).toEqual({ audience: 'new-engineers', readingTimeMinutes: 12 });
    const blob = await db()
      .selectFrom('content_blobs')
      .selectAll()
      .where('content_hash', '=', sha256(content))
      .executeTakeFirstOrThrow();
    expect(blob.body).toBe(content);

    const review = await resourceRow('handbook', 'review');
    expect(JSON.parse(review.manifest)).toEqual({});
    expect(review.facets).toBeNull();

    const catalogVersion = await currentCatalogVersion('handbook');
    const pins = await expectedPins('handbook');
    expect(pins.map((pin) => pin.resourceHumanRef)).toEqual([
      'svc/handbook/onboarding',
      'svc/handbook/review',
    ]);
    expect(JSON.parse(catalogVersion.pins)).toEqual(pins);
    expect(catalogVersion).toMatchObject({
      version: '1.0.0',
      resource_count: 2,
      manifest_hash: sha256(sortedJson(pins)),
      published_at: T1,
    });
  });

  it('reports every change as a line and sums them up', async () => {
    await writeTree(dir, {
      'handbook/catalog.json': catalogJson(),
      'handbook/resources/onboarding.json': resourceJson(),
    });
    const report = await runImport(backend, dir, { at: T1 });
    expect([...report.lines]).toEqual([
      '+ catalog svc/handbook (active): "Engineering handbook"',
      '+ resource svc/handbook/onboarding (document, active): version 1.0.0 published, 13 bytes in database-text',
      '+ catalog version svc/handbook 1.0.0: 1 pin',
    ]);
    expect(report.summary).toBe(
      'import: created 1 catalog, 1 resource, 1 resource version; published 1 catalog version ' +
        '(read 1 catalog, 1 resource file)',
    );
  });

  it('uses the given timestamp and UUIDv7 ids, and the clock by default', async () => {
    await writeTree(dir, { 'handbook/catalog.json': catalogJson() });
    const before = new Date().toISOString();
    await runImport(backend, dir);
    const catalog = await catalogRow('handbook');
    expect(catalog.created_at >= before).toBe(true);
    expect(catalog.created_at).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/);
    const version = await currentCatalogVersion('handbook');
    expect(version.resource_count).toBe(0);
    expect(JSON.parse(version.pins)).toEqual([]);
    expect(version.manifest_hash).toBe(sha256('[]'));
  });
});

describe('D15 re-import', () => {
  it('writes nothing when nothing changed: same rows, same timestamps, same objects', async () => {
    await writeTree(dir, {
      'handbook/catalog.json': catalogJson({ facets: { capability: ['onboarding'] } }),
      'handbook/resources/a.json': resourceJson({ manifest: { b: 1, a: { y: 2, x: 1 } } }),
      'handbook/resources/big.json': resourceJson({ content: 'x'.repeat(70_000) }),
      'handbook/resources/draft.json': resourceJson({ status: 'draft' }),
      'guides/catalog.json': catalogJson({ name: 'Guides', status: 'archived' }),
    });
    await runImport(backend, dir, { at: T1 });
    const before = await dumpStorage(backend);
    expect(Object.keys(before.objects)).toHaveLength(1);

    // Key order in a manifest is not a change.
    await writeTree(dir, {
      'handbook/resources/a.json': resourceJson({ manifest: { a: { x: 1, y: 2 }, b: 1 } }),
    });
    const report = await runImport(backend, dir, { at: T2 });
    expect(report.changed).toBe(false);
    expect([...report.lines]).toEqual([]);
    expect(report.counts.resourcesUnchanged).toBe(3);
    expect(report.summary).toBe('import: nothing to change (read 2 catalogs, 3 resource files)');
    expect(await dumpStorage(backend)).toEqual(before);
  });

  it('keeps ids by slug across imports', async () => {
    await writeTree(dir, {
      'handbook/catalog.json': catalogJson(),
      'handbook/resources/a.json': resourceJson(),
    });
    await runImport(backend, dir, { at: T1 });
    const catalog = await catalogRow('handbook');
    const resource = await resourceRow('handbook', 'a');
    await writeTree(dir, {
      'handbook/catalog.json': catalogJson({ name: 'Renamed', version: '1.1.0' }),
      'handbook/resources/a.json': resourceJson({ title: 'Renamed', version: '2.0.0', content: 'new' }),
    });
    await runImport(backend, dir, { at: T2 });
    expect((await catalogRow('handbook')).id).toBe(catalog.id);
    expect((await resourceRow('handbook', 'a')).id).toBe(resource.id);
  });
});

/** The database, refusing to open any transaction: proves that an import did not even start a write. */
function withoutTransactions(db: Db): Db {
  return new Proxy(db, {
    get(target, property) {
      if (property === 'transaction') {
        return () => {
          throw new Error('a transaction was opened');
        };
      }
      const value = Reflect.get(target, property, target) as unknown;
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

describe('D15 writes: all or nothing, objects first', () => {
  it('opens no transaction at all when nothing changed, nor for a dry run', async () => {
    await writeTree(dir, {
      'handbook/catalog.json': catalogJson(),
      'handbook/resources/a.json': resourceJson(),
    });
    await runImport(backend, dir, { at: T1 });
    const deps = { db: withoutTransactions(db()), objectStore: backend.objectStore };
    const unchanged = await importTree(deps, { dir, owner: { kind: 'svc' }, now: () => T2 });
    expect(unchanged.changed).toBe(false);

    await writeTree(dir, {
      'handbook/resources/b.json': resourceJson(),
      'handbook/catalog.json': catalogJson({ version: '2' }),
    });
    const dry = await importTree(deps, { dir, owner: { kind: 'svc' }, dryRun: true, now: () => T2 });
    expect(dry.changed).toBe(true);
    await expect(importTree(deps, { dir, owner: { kind: 'svc' }, now: () => T2 })).rejects.toThrow(
      'a transaction was opened',
    );
  });

  it('writes nothing when a file changes between its reading and its writing', async () => {
    await writeTree(dir, {
      'handbook/catalog.json': catalogJson(),
      'handbook/resources/a.json': resourceJson({ content: 'first' }),
    });
    await runImport(backend, dir, { at: T1 });
    const before = await dumpStorage(backend);
    await writeTree(dir, {
      'handbook/catalog.json': catalogJson({ version: '2' }),
      'handbook/resources/big.json': resourceJson({ content: 'o'.repeat(70_000) }),
      'handbook/resources/c.json': resourceJson({ content: 'planned' }),
    });
    // Objects are stored before the transaction: the moment to change a file the plan already read.
    const objectStore: ContentStore = {
      backend: 'object-storage',
      put: async (hash, content) => {
        await writeTree(dir, { 'handbook/resources/c.json': resourceJson({ content: 'edited meanwhile' }) });
        return backend.objectStore.put(hash, content);
      },
      get: (hash) => backend.objectStore.get(hash),
      delete: (hash) => backend.objectStore.delete(hash),
      check: () => backend.objectStore.check(),
    };
    await expect(
      importTree({ db: db(), objectStore }, { dir, owner: { kind: 'svc' }, now: () => T2 }),
    ).rejects.toMatchObject({
      name: 'ImportValidationError',
      problems: [
        'handbook/resources/c.json: changed while it was being imported; nothing was written, import again',
      ],
    });
    // Objects go first; the one this failed import stored is removed again, and no row moved.
    expect(await dumpStorage(backend)).toEqual(before);
  });

  it('stores object-storage content before any row that names it exists', async () => {
    const big = 'o'.repeat(70_000);
    await writeTree(dir, {
      'handbook/catalog.json': catalogJson(),
      'handbook/resources/big.json': resourceJson({ content: big }),
    });
    const seenRows: number[] = [];
    const objectStore: ContentStore = {
      backend: 'object-storage',
      put: async (hash, content) => {
        const rows = await db()
          .selectFrom('resource_versions')
          .select('id')
          .where('content_hash', '=', hash)
          .execute();
        seenRows.push(rows.length);
        return backend.objectStore.put(hash, content);
      },
      get: (hash) => backend.objectStore.get(hash),
      delete: (hash) => backend.objectStore.delete(hash),
      check: () => backend.objectStore.check(),
    };
    await importTree({ db: db(), objectStore }, { dir, owner: { kind: 'svc' }, now: () => T1 });
    expect(seenRows).toEqual([0]);
    const version = await db().selectFrom('resource_versions').selectAll().executeTakeFirstOrThrow();
    expect(version.content_hash).toBe(sha256(big));
    expect(await backend.objectStore.get(sha256(big))).toBe(big);
  });

  it('plans again inside the transaction, against what another import wrote meanwhile', async () => {
    const big = 'q'.repeat(70_000);
    await writeTree(dir, {
      'handbook/catalog.json': catalogJson(),
      'handbook/resources/big.json': resourceJson({ content: big }),
    });
    const rival = await newTreeDir(backend);
    await writeTree(rival, {
      'handbook/catalog.json': catalogJson(),
      'handbook/resources/big.json': resourceJson({ content: big }),
    });
    let rivalImported = false;
    const objectStore: ContentStore = {
      backend: 'object-storage',
      put: async (hash, content) => {
        const stored = await backend.objectStore.put(hash, content);
        // Between this import's first plan and its transaction, another one lands the same tree.
        if (!rivalImported) {
          rivalImported = true;
          await runImport(backend, rival, { at: T1 });
        }
        return stored;
      },
      get: (hash) => backend.objectStore.get(hash),
      delete: (hash) => backend.objectStore.delete(hash),
      check: () => backend.objectStore.check(),
    };
    const report = await importTree(
      { db: db(), objectStore },
      { dir, owner: { kind: 'svc' }, now: () => T2 },
    );
    expect(report.changed).toBe(false);
    expect(await db().selectFrom('catalogs').select('created_at').execute()).toEqual([{ created_at: T1 }]);
    expect(await db().selectFrom('resources').select('id').execute()).toHaveLength(1);
  });

  it('retries the transaction when a concurrent writer conflicts with it', async () => {
    await writeTree(dir, {
      'handbook/catalog.json': catalogJson(),
      'handbook/resources/a.json': resourceJson(),
    });
    let conflicts = 2;
    const progress: string[] = [];
    const flaky = new Proxy(db(), {
      get(target, property) {
        if (property !== 'transaction') {
          const value = Reflect.get(target, property, target) as unknown;
          return typeof value === 'function' ? value.bind(target) : value;
        }
        return () => ({
          execute: async <T>(work: (trx: Db) => Promise<T>): Promise<T> => {
            if (conflicts-- > 0)
              throw Object.assign(new Error('database is busy'), { code: 'SQLITE_BUSY_SNAPSHOT' });
            return target.transaction().execute(work);
          },
        });
      },
    });
    const report = await importTree(
      { db: flaky, objectStore: backend.objectStore },
      { dir, owner: { kind: 'svc' }, now: () => T1, onProgress: (line) => progress.push(line) },
    );
    expect(report.counts.resourcesCreated).toBe(1);
    expect(progress).toEqual([
      'storage changed during the import; planning again (attempt 2)',
      'storage changed during the import; planning again (attempt 3)',
    ]);

    // Six attempts in all, each after a pause that grows: then the import fails as a busy service (503).
    conflicts = 6;
    await writeTree(dir, {
      'handbook/resources/b.json': resourceJson(),
      'handbook/catalog.json': catalogJson({ version: '2' }),
    });
    await expect(
      importTree(
        { db: flaky, objectStore: backend.objectStore },
        { dir, owner: { kind: 'svc' }, now: () => T2 },
      ),
    ).rejects.toBeInstanceOf(WriteContentionError);
  });

  it('writes no row when the object store fails', async () => {
    await writeTree(dir, {
      'handbook/catalog.json': catalogJson(),
      'handbook/resources/small.json': resourceJson(),
      'handbook/resources/big.json': resourceJson({ content: 'p'.repeat(70_000) }),
    });
    const before = await dumpStorage(backend);
    const objectStore: ContentStore = {
      backend: 'object-storage',
      put: async () => {
        throw new Error('object store is down');
      },
      get: (hash) => backend.objectStore.get(hash),
      delete: (hash) => backend.objectStore.delete(hash),
      check: () => backend.objectStore.check(),
    };
    await expect(
      importTree({ db: db(), objectStore }, { dir, owner: { kind: 'svc' }, now: () => T1 }),
    ).rejects.toThrow('object store is down');
    expect(await dumpStorage(backend)).toEqual(before);
  });
});

describe('D15 resource versions', () => {
  beforeEach(async () => {
    await writeTree(dir, {
      'handbook/catalog.json': catalogJson(),
      'handbook/resources/a.json': resourceJson({ content: 'first', manifest: { step: 1 } }),
      'handbook/resources/b.json': resourceJson({ content: 'other' }),
    });
    await runImport(backend, dir, { at: T1 });
  });

  it('publishes a new version and supersedes the old one when content and label change', async () => {
    await writeTree(dir, {
      'handbook/catalog.json': catalogJson({ version: '1.1.0' }),
      'handbook/resources/a.json': resourceJson({
        version: '1.1.0',
        content: 'second',
        manifest: { step: 1 },
      }),
    });
    const report = await runImport(backend, dir, { at: T2 });
    expect([...report.lines]).toContain(
      '~ resource svc/handbook/a: version 1.0.0 → 1.1.0 (content changed; 1.0.0 superseded)',
    );
    const resource = await resourceRow('handbook', 'a');
    const [old, current] = await versionsOf(resource.id);
    expect(old).toMatchObject({
      version: '1.0.0',
      status: 'superseded',
      superseded_at: T2,
      published_at: T1,
    });
    expect(current).toMatchObject({
      id: resource.current_version_id,
      version: '1.1.0',
      status: 'published',
      published_at: T2,
      superseded_at: null,
      content_hash: sha256('second'),
    });
    expect(resource.updated_at).toBe(T2);
    expect(resource.created_at).toBe(T1);
    // The untouched resource keeps its row as it was.
    expect((await resourceRow('handbook', 'b')).updated_at).toBe(T1);

    const versions = await catalogVersions('handbook');
    expect(versions.map((v) => v.version)).toEqual(['1.0.0', '1.1.0']);
    const pins = await expectedPins('handbook');
    expect(pins.find((pin) => pin.resourceId === resource.id)?.resourceVersionId).toBe(current!.id);
    const latest = await currentCatalogVersion('handbook');
    expect(latest.version).toBe('1.1.0');
    expect(JSON.parse(latest.pins)).toEqual(pins);
    expect(latest.manifest_hash).toBe(sha256(sortedJson(pins)));
    expect((await catalogRow('handbook')).updated_at).toBe(T2);
  });

  it.each([
    ['manifest', { manifest: { step: 2 } }],
    ['mediaType', { mediaType: 'text/plain' }],
    ['label', {}],
  ])('makes a new version when only the %s changes under a new label', async (_what, change) => {
    await writeTree(dir, {
      'handbook/catalog.json': catalogJson({ version: '1.1.0' }),
      'handbook/resources/a.json': resourceJson({
        content: 'first',
        manifest: { step: 1 },
        ...change,
        version: '1.0.1',
      }),
    });
    await runImport(backend, dir, { at: T2 });
    const resource = await resourceRow('handbook', 'a');
    const versions = await versionsOf(resource.id);
    expect(versions.map((v) => [v.version, v.status])).toEqual([
      ['1.0.0', 'superseded'],
      ['1.0.1', 'published'],
    ]);
    expect(JSON.parse(resource.manifest)).toEqual(JSON.parse(versions[1]!.manifest));
  });

  it('refuses content changed under an unchanged version label, and writes nothing', async () => {
    const before = await dumpStorage(backend);
    await writeTree(dir, {
      'handbook/catalog.json': catalogJson({ version: '1.1.0' }),
      'handbook/resources/a.json': resourceJson({ content: 'sneaky edit', manifest: { step: 1 } }),
    });
    const problems = await expectRefused(runImport(backend, dir, { at: T2 }));
    expect(problems).toEqual([
      'handbook/resources/a.json: version: content changed but the version "1.0.0" did not; ' +
        'a version label names immutable content, so give the new version a new label',
    ]);
    expect(await dumpStorage(backend)).toEqual(before);
  });

  it('refuses a manifest or media type change under an unchanged label (the label names the version)', async () => {
    await writeTree(dir, {
      'handbook/resources/a.json': resourceJson({
        content: 'first',
        manifest: { step: 2 },
        mediaType: 'text/plain',
      }),
    });
    const problems = await expectRefused(runImport(backend, dir, { at: T2 }));
    expect(problems).toHaveLength(1);
    expect(problems[0]).toMatch(/^handbook\/resources\/a\.json: version: manifest, mediaType changed but/);
  });

  it('D12, D21: a manifest key named __proto__ is data: stored, hashed, and a change inside it refused', async () => {
    const withProto = (value: number) =>
      `{"kind":"document","title":"Proto","version":"1.0.0","mediaType":"text/plain","content":"x",` +
      `"manifest":{"__proto__":{"a":${value}},"b":1}}`;
    await writeTree(dir, { 'proto/catalog.json': catalogJson(), 'proto/resources/p.json': withProto(1) });
    await runImport(backend, dir, { at: T2 });
    const stored = await resourceRow('proto', 'p');
    expect(stored.manifest).toBe('{"__proto__":{"a":1},"b":1}');
    await writeTree(dir, { 'proto/resources/p.json': withProto(2) });
    const problems = await expectRefused(runImport(backend, dir, { at: T3 }));
    expect(problems).toEqual([
      expect.stringMatching(/^proto\/resources\/p\.json: version: manifest changed but/),
    ]);
  });

  it('refuses a new label equal to an earlier version label of the same resource', async () => {
    await writeTree(dir, {
      'handbook/catalog.json': catalogJson({ version: '1.1.0' }),
      'handbook/resources/a.json': resourceJson({
        version: '1.1.0',
        content: 'second',
        manifest: { step: 1 },
      }),
    });
    await runImport(backend, dir, { at: T2 });
    const before = await dumpStorage(backend);
    await writeTree(dir, {
      'handbook/catalog.json': catalogJson({ version: '1.2.0' }),
      'handbook/resources/a.json': resourceJson({
        version: '1.0.0',
        content: 'third',
        manifest: { step: 1 },
      }),
    });
    const problems = await expectRefused(runImport(backend, dir, { at: T3 }));
    expect(problems).toEqual([
      'handbook/resources/a.json: version: "1.0.0" already names an earlier version of this resource; ' +
        'choose a new version label',
    ]);
    expect(await dumpStorage(backend)).toEqual(before);
  });

  it('lists every refusal of one import, across files', async () => {
    await writeTree(dir, {
      'handbook/resources/a.json': resourceJson({ content: 'changed a', manifest: { step: 1 } }),
      'handbook/resources/b.json': resourceJson({ content: 'changed b' }),
    });
    const problems = await expectRefused(runImport(backend, dir, { at: T2 }));
    expect(problems.map((line) => line.split(':')[0])).toEqual([
      'handbook/resources/a.json',
      'handbook/resources/b.json',
    ]);
  });

  it('does not make a new version when only the storage backend changes', async () => {
    const before = await dumpStorage(backend);
    await writeTree(dir, {
      'handbook/resources/a.json': resourceJson({
        content: 'first',
        manifest: { step: 1 },
        storageBackend: 'object-storage',
      }),
    });
    const report = await runImport(backend, dir, { at: T2 });
    expect(report.changed).toBe(false);
    expect(await dumpStorage(backend)).toEqual(before);
  });

  it('updates the resource row alone when only its descriptive fields change', async () => {
    await writeTree(dir, {
      'handbook/resources/b.json': resourceJson({
        content: 'other',
        kind: 'policy',
        title: 'New title',
        description: 'Now described',
        facets: { capability: ['review'] },
      }),
    });
    const report = await runImport(backend, dir, { at: T2 });
    expect([...report.lines]).toEqual([
      '~ resource svc/handbook/b: kind, title, description, facets changed',
    ]);
    const b = await resourceRow('handbook', 'b');
    expect(b).toMatchObject({
      kind: 'policy',
      title: 'New title',
      description: 'Now described',
      updated_at: T2,
    });
    expect(JSON.parse(b.facets!)).toEqual({ capability: ['review'] });
    expect(await versionsOf(b.id)).toHaveLength(1);
    expect(await catalogVersions('handbook')).toHaveLength(1);
    expect((await catalogRow('handbook')).updated_at).toBe(T1);
  });
});

describe('D15 drafts and archived resources', () => {
  it('keeps a draft resource out of the pins with a draft version, and publishes it when it leaves draft', async () => {
    await writeTree(dir, {
      'handbook/catalog.json': catalogJson(),
      'handbook/resources/a.json': resourceJson(),
      'handbook/resources/wip.json': resourceJson({ status: 'draft', content: 'not yet' }),
    });
    await runImport(backend, dir, { at: T1 });
    const wip = await resourceRow('handbook', 'wip');
    const [draft] = await versionsOf(wip.id);
    expect(draft).toMatchObject({ status: 'draft', published_at: null });
    expect(JSON.parse((await currentCatalogVersion('handbook')).pins)).toEqual(
      await expectedPins('handbook'),
    );
    expect((await currentCatalogVersion('handbook')).resource_count).toBe(1);

    await writeTree(dir, {
      'handbook/catalog.json': catalogJson({ version: '1.1.0' }),
      'handbook/resources/wip.json': resourceJson({ status: 'active', content: 'not yet' }),
    });
    const report = await runImport(backend, dir, { at: T2 });
    expect([...report.lines]).toContain(
      '~ resource svc/handbook/wip: version 1.0.0 published; status draft → active',
    );
    const versions = await versionsOf(wip.id);
    expect(versions).toHaveLength(1);
    expect(versions[0]).toMatchObject({ id: draft!.id, status: 'published', published_at: T2 });
    expect(versions[0]!.content_hash).toBe(draft!.content_hash);
    const current = await currentCatalogVersion('handbook');
    expect(current.resource_count).toBe(2);
    expect(JSON.parse(current.pins)).toEqual(await expectedPins('handbook'));
  });

  it('gives a new version of a draft resource the draft status', async () => {
    await writeTree(dir, {
      'handbook/catalog.json': catalogJson(),
      'handbook/resources/wip.json': resourceJson({ status: 'draft', content: 'v1' }),
    });
    await runImport(backend, dir, { at: T1 });
    await writeTree(dir, {
      'handbook/resources/wip.json': resourceJson({ status: 'draft', content: 'v2', version: '2' }),
    });
    const report = await runImport(backend, dir, { at: T2 });
    // Draft content is not pinned, so the catalog version stays.
    expect(report.counts.catalogVersionsPublished).toBe(0);
    const versions = await versionsOf((await resourceRow('handbook', 'wip')).id);
    expect(versions.map((v) => [v.version, v.status, v.published_at])).toEqual([
      ['1.0.0', 'superseded', null],
      ['2', 'draft', null],
    ]);
  });

  it('archives a resource whose file disappeared, once, and un-archives it when the file returns', async () => {
    await writeTree(dir, {
      'handbook/catalog.json': catalogJson(),
      'handbook/resources/a.json': resourceJson(),
      'handbook/resources/gone.json': resourceJson({ content: 'soon gone' }),
    });
    await runImport(backend, dir, { at: T1 });
    const gone = await resourceRow('handbook', 'gone');

    await removeFromTree(dir, 'handbook/resources/gone.json');
    await writeTree(dir, { 'handbook/catalog.json': catalogJson({ version: '1.1.0' }) });
    const report = await runImport(backend, dir, { at: T2 });
    expect([...report.lines]).toContain('- resource svc/handbook/gone: archived (its file is gone)');
    expect(report.counts.resourcesArchived).toBe(1);
    expect(await resourceRow('handbook', 'gone')).toMatchObject({
      id: gone.id,
      status: 'archived',
      archived_at: T2,
      updated_at: T2,
      current_version_id: gone.current_version_id,
    });
    const pins = JSON.parse((await currentCatalogVersion('handbook')).pins) as { resourceId: string }[];
    expect(pins.map((pin) => pin.resourceId)).not.toContain(gone.id);

    const archived = await dumpStorage(backend);
    const again = await runImport(backend, dir, { at: T3 });
    expect(again.changed).toBe(false);
    expect(await dumpStorage(backend)).toEqual(archived);

    await writeTree(dir, {
      'handbook/catalog.json': catalogJson({ version: '1.2.0' }),
      'handbook/resources/gone.json': resourceJson({ content: 'soon gone' }),
    });
    const back = await runImport(backend, dir, { at: T4 });
    expect([...back.lines]).toContain('~ resource svc/handbook/gone: status archived → active');
    expect(await resourceRow('handbook', 'gone')).toMatchObject({
      id: gone.id,
      status: 'active',
      archived_at: null,
      updated_at: T4,
      current_version_id: gone.current_version_id,
    });
    expect(JSON.parse((await currentCatalogVersion('handbook')).pins)).toEqual(
      await expectedPins('handbook'),
    );
    expect((await currentCatalogVersion('handbook')).resource_count).toBe(2);
  });

  it('sets archivedAt when a file says archived and clears it when it no longer does', async () => {
    await writeTree(dir, {
      'handbook/catalog.json': catalogJson(),
      'handbook/resources/a.json': resourceJson({ status: 'archived' }),
    });
    await runImport(backend, dir, { at: T1 });
    expect(await resourceRow('handbook', 'a')).toMatchObject({ status: 'archived', archived_at: T1 });
    expect((await currentCatalogVersion('handbook')).resource_count).toBe(0);
    await writeTree(dir, {
      'handbook/catalog.json': catalogJson({ version: '2' }),
      'handbook/resources/a.json': resourceJson({ status: 'active' }),
    });
    await runImport(backend, dir, { at: T2 });
    expect(await resourceRow('handbook', 'a')).toMatchObject({ status: 'active', archived_at: null });
  });
});

describe('D15 catalogs and their versions', () => {
  beforeEach(async () => {
    await writeTree(dir, {
      'handbook/catalog.json': catalogJson({ facets: { capability: ['onboarding'] } }),
      'handbook/resources/a.json': resourceJson(),
    });
    await runImport(backend, dir, { at: T1 });
  });

  it('refuses changed pins under an unchanged catalog label', async () => {
    const before = await dumpStorage(backend);
    await writeTree(dir, { 'handbook/resources/b.json': resourceJson() });
    const problems = await expectRefused(runImport(backend, dir, { at: T2 }));
    expect(problems).toEqual([
      `handbook/catalog.json: version: the catalog's pins changed (+svc/handbook/b) but its version "1.0.0" ` +
        'did not; a catalog version label names one set of pins, so give the catalog a new version',
    ]);
    expect(await dumpStorage(backend)).toEqual(before);
  });

  it('refuses a catalog label that an earlier catalog version used', async () => {
    await writeTree(dir, {
      'handbook/catalog.json': catalogJson({ version: '2.0.0' }),
      'handbook/resources/b.json': resourceJson(),
    });
    await runImport(backend, dir, { at: T2 });
    await writeTree(dir, { 'handbook/catalog.json': catalogJson({ version: '1.0.0' }) });
    await removeFromTree(dir, 'handbook/resources/b.json');
    const problems = await expectRefused(runImport(backend, dir, { at: T3 }));
    expect(problems).toEqual([
      'handbook/catalog.json: version: "1.0.0" already names an earlier version of this catalog; ' +
        'choose a new version label',
    ]);
  });

  it('publishes a new catalog version when only the label changes', async () => {
    await writeTree(dir, {
      'handbook/catalog.json': catalogJson({ version: '1.0.1', facets: { capability: ['onboarding'] } }),
    });
    const report = await runImport(backend, dir, { at: T2 });
    expect([...report.lines]).toEqual(['+ catalog version svc/handbook 1.0.1: 1 pin (was 1.0.0)']);
    const [first, second] = await catalogVersions('handbook');
    expect(second).toMatchObject({ version: '1.0.1', published_at: T2, manifest_hash: first!.manifest_hash });
    expect((await catalogRow('handbook')).current_version_id).toBe(second!.id);
  });

  it('updates the catalog row and replaces its facet rows, without a new version', async () => {
    await writeTree(dir, {
      'handbook/catalog.json': catalogJson({
        name: 'Handbook',
        description: 'All of it',
        status: 'archived',
        facets: { capability: ['delivery'], channel: ['docs', 'docs'] },
      }),
    });
    const report = await runImport(backend, dir, { at: T2 });
    expect([...report.lines]).toEqual([
      '~ catalog svc/handbook: name, description, facets changed; status active → archived',
    ]);
    const catalog = await catalogRow('handbook');
    expect(catalog).toMatchObject({
      name: 'Handbook',
      description: 'All of it',
      status: 'archived',
      archived_at: T2,
      updated_at: T2,
      created_at: T1,
    });
    const facets = await db()
      .selectFrom('catalog_facet_values')
      .select(['facet', 'value'])
      .where('catalog_id', '=', catalog.id)
      .orderBy('facet')
      .execute();
    expect(facets).toEqual([
      { facet: 'capability', value: 'delivery' },
      { facet: 'channel', value: 'docs' },
    ]);
    expect(await catalogVersions('handbook')).toHaveLength(1);

    await writeTree(dir, { 'handbook/catalog.json': catalogJson({ name: 'Handbook', status: 'active' }) });
    await runImport(backend, dir, { at: T3 });
    expect(await catalogRow('handbook')).toMatchObject({
      status: 'active',
      archived_at: null,
      description: null,
    });
    expect(
      await db()
        .selectFrom('catalog_facet_values')
        .selectAll()
        .where('catalog_id', '=', catalog.id)
        .execute(),
    ).toEqual([]);
  });

  it('leaves catalogs whose folders are absent from the tree untouched', async () => {
    const other = await newTreeDir(backend);
    await writeTree(other, {
      'guides/catalog.json': catalogJson({ name: 'Guides' }),
      'guides/resources/x.json': resourceJson(),
    });
    await runImport(backend, other, { at: T2 });
    const guides = await catalogRow('guides');
    const guideResource = await resourceRow('guides', 'x');

    await writeTree(dir, {
      'handbook/catalog.json': catalogJson({ name: 'Changed', facets: { capability: ['onboarding'] } }),
    });
    await runImport(backend, dir, { at: T3 });
    expect(await catalogRow('guides')).toEqual(guides);
    expect(await resourceRow('guides', 'x')).toEqual(guideResource);
  });
});

describe('D15 storage backend', () => {
  it('keeps content of exactly 65536 UTF-8 bytes in the database and moves 65537 to object storage', async () => {
    // Two-byte characters: the threshold counts bytes, not characters.
    const atLimit = 'é'.repeat(32_768);
    const overLimit = `${atLimit}x`;
    await writeTree(dir, {
      'handbook/catalog.json': catalogJson(),
      'handbook/resources/at-limit.json': resourceJson({ content: atLimit }),
      'handbook/resources/over-limit.json': resourceJson({ content: overLimit }),
      'handbook/resources/forced.json': resourceJson({ content: 'small', storageBackend: 'object-storage' }),
    });
    const report = await runImport(backend, dir, { at: T1 });
    expect(report.counts.objectsStored).toBe(2);

    const at = (await versionsOf((await resourceRow('handbook', 'at-limit')).id))[0]!;
    expect(at).toMatchObject({ storage_backend: 'database-text', content_size_bytes: 65_536 });
    const over = (await versionsOf((await resourceRow('handbook', 'over-limit')).id))[0]!;
    expect(over).toMatchObject({ storage_backend: 'object-storage', content_size_bytes: 65_537 });
    const forced = (await versionsOf((await resourceRow('handbook', 'forced')).id))[0]!;
    expect(forced.storage_backend).toBe('object-storage');

    const blobs = await db().selectFrom('content_blobs').select('content_hash').execute();
    expect(blobs.map((b) => b.content_hash)).toEqual([sha256(atLimit)]);
    expect(await backend.objectStore.get(sha256(overLimit))).toBe(overLimit);
    const objects = Object.keys((await dumpStorage(backend)).objects);
    expect(objects).toHaveLength(2);
    expect(objects.some((key) => key.endsWith(sha256(overLimit)))).toBe(true);
    expect(await backend.content.read('object-storage', sha256('small'))).toBe('small');
  });
});

describe('D15 account namespaces', () => {
  it('creates the account with plan free and keeps its catalogs apart from the service ones', async () => {
    await writeTree(dir, {
      'handbook/catalog.json': catalogJson(),
      'handbook/resources/a.json': resourceJson(),
    });
    await runImport(backend, dir, { at: T1 });
    const svc = await dumpStorage(backend);

    const report = await runImport(backend, dir, { at: T2, owner: { kind: 'account', accountId: 'acme' } });
    expect([...report.lines][0]).toBe('+ account acme (plan free)');
    expect([...report.lines]).toContain('+ catalog version org/handbook 1.0.0: 1 pin');
    expect(await db().selectFrom('accounts').selectAll().execute()).toEqual([
      { id: 'acme', name: null, plan: 'free', created_at: T2, updated_at: T2 },
    ]);
    const mine = await catalogRow('handbook', 'acme');
    expect(mine.id).not.toBe((await catalogRow('handbook')).id);
    const pins = JSON.parse(await readPinsText(db(), mine.current_version_id!)) as {
      resourceHumanRef: string;
    }[];
    expect(pins.map((pin) => pin.resourceHumanRef)).toEqual(['org/handbook/a']);
    expect((await dumpStorage(backend)).tables.catalogs).toEqual(
      expect.arrayContaining(svc.tables.catalogs!),
    );

    // An existing account is used as it is.
    await db().updateTable('accounts').set({ plan: 'pro' }).execute();
    const again = await runImport(backend, dir, { at: T3, owner: { kind: 'account', accountId: 'acme' } });
    expect(again.changed).toBe(false);
    expect((await db().selectFrom('accounts').selectAll().executeTakeFirstOrThrow()).plan).toBe('pro');
  });

  it('refuses an account id that is not printable', async () => {
    await writeTree(dir, { 'handbook/catalog.json': catalogJson() });
    const problems = await expectRefused(
      runImport(backend, dir, { owner: { kind: 'account', accountId: 'no spaces' } }),
    );
    expect(problems).toEqual([
      'account "no spaces": must be 1-128 characters of letters, digits, ".", "_", ":" or "-", and not svc (the service\'s own)',
    ]);
  });

  it('refuses svc as an account id: it names the service, in paths and in the change log (D26)', async () => {
    await writeTree(dir, { 'handbook/catalog.json': catalogJson() });
    const problems = await expectRefused(
      runImport(backend, dir, { owner: { kind: 'account', accountId: 'svc' } }),
    );
    expect(problems).toEqual([
      'account "svc": must be 1-128 characters of letters, digits, ".", "_", ":" or "-", and not svc (the service\'s own)',
    ]);
    expect(await db().selectFrom('accounts').selectAll().execute()).toEqual([]);
  });
});

describe('D15 dry run', () => {
  it('validates and plans, reports the same changes, and writes nothing', async () => {
    await writeTree(dir, {
      'handbook/catalog.json': catalogJson(),
      'handbook/resources/a.json': resourceJson(),
      'handbook/resources/big.json': resourceJson({ content: 'y'.repeat(70_000) }),
    });
    const empty = await dumpStorage(backend);
    const dry = await runImport(backend, dir, {
      at: T1,
      dryRun: true,
      owner: { kind: 'account', accountId: 'acme' },
    });
    expect(dry.dryRun).toBe(true);
    expect(dry.changed).toBe(true);
    expect(dry.summary).toMatch(/^dry run, nothing written: would have created 1 account, 1 catalog/);
    expect(await dumpStorage(backend)).toEqual(empty);

    const real = await runImport(backend, dir, { at: T1, owner: { kind: 'account', accountId: 'acme' } });
    expect([...real.lines]).toEqual([...dry.lines]);
    expect(real.counts).toEqual(dry.counts);
  });

  it('reports refusals without writing', async () => {
    await writeTree(dir, {
      'handbook/catalog.json': catalogJson(),
      'handbook/resources/a.json': resourceJson(),
    });
    await runImport(backend, dir, { at: T1 });
    const before = await dumpStorage(backend);
    await writeTree(dir, { 'handbook/resources/a.json': resourceJson({ content: 'edited' }) });
    await expectRefused(runImport(backend, dir, { at: T2, dryRun: true }));
    expect(await dumpStorage(backend)).toEqual(before);
  });
});
