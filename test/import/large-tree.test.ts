import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readStoredPins } from '../../src/catalog/stored-pins.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { catalogJson, newTreeDir, resourceJson, runImport, T1, T2, T3, writeTree } from './support.js';

// More resources than one multi-row insert of resource rows may carry under SQLite's bound-parameter
// limit (13 columns × 2,600 rows > 32,766), and more version ids than one `in (…)` list holds.
const COUNT = 2_600;

let backend: TestBackend;
let dir: string;
beforeAll(async () => {
  backend = await createTestBackend();
  dir = await newTreeDir(backend);
});
afterAll(async () => {
  await backend.cleanup();
});

function tree(version: string, catalogVersion: string) {
  const files: Record<string, Record<string, unknown>> = {
    'bulk/catalog.json': catalogJson({ name: 'Bulk', version: catalogVersion }),
  };
  for (let i = 0; i < COUNT; i++) {
    const slug = `item-${String(i).padStart(5, '0')}`;
    files[`bulk/resources/${slug}.json`] = resourceJson({ version, content: `# ${slug} ${version}\n` });
  }
  return files;
}

describe('D15 large trees', () => {
  it('imports thousands of resources in batches, reporting progress', async () => {
    await writeTree(dir, tree('1.0.0', '1'));
    const progress: string[] = [];
    const report = await runImport(backend, dir, { at: T1, onProgress: (line) => progress.push(line) });
    expect(report.counts).toMatchObject({ resourcesCreated: COUNT, resourceVersionsCreated: COUNT });
    // Resources go in batches of 500 with their versions, each batch's manifests and contents read
    // afresh; progress every 1,000 of each.
    expect(progress).toEqual([
      `validated resource files: 1000 of ${COUNT}`,
      `validated resource files: 2000 of ${COUNT}`,
      `validated resource files: ${COUNT} of ${COUNT}`,
      `wrote resources: 1000 of ${COUNT}`,
      `wrote resource versions: 1000 of ${COUNT}`,
      `wrote resources: 2000 of ${COUNT}`,
      `wrote resource versions: 2000 of ${COUNT}`,
      `wrote resources: ${COUNT} of ${COUNT}`,
      `wrote resource versions: ${COUNT} of ${COUNT}`,
    ]);

    const db = backend.databases.primary;
    const count = await db
      .selectFrom('resources')
      .select((eb) => eb.fn.countAll().as('n'))
      .executeTakeFirstOrThrow();
    expect(Number(count.n)).toBe(COUNT);
    const catalog = await db
      .selectFrom('catalogs')
      .innerJoin('catalog_versions as v', 'v.id', 'catalogs.current_version_id')
      .select(['v.id', 'v.resource_count'])
      .executeTakeFirstOrThrow();
    expect(catalog.resource_count).toBe(COUNT);
    expect(await readStoredPins(db, catalog.id)).toHaveLength(COUNT);
  });

  it('re-imports the unchanged tree without writing', async () => {
    const report = await runImport(backend, dir, { at: T2 });
    expect(report.changed).toBe(false);
    expect(report.counts.resourcesUnchanged).toBe(COUNT);
  });

  it('supersedes thousands of versions at once', async () => {
    await writeTree(dir, tree('2.0.0', '2'));
    const report = await runImport(backend, dir, { at: T3 });
    expect(report.counts).toMatchObject({
      resourceVersionsCreated: COUNT,
      resourceVersionsSuperseded: COUNT,
    });
    const superseded = await backend.databases.primary
      .selectFrom('resource_versions')
      .select((eb) => eb.fn.countAll().as('n'))
      .where('status', '=', 'superseded')
      .where('superseded_at', '=', T3)
      .executeTakeFirstOrThrow();
    expect(Number(superseded.n)).toBe(COUNT);
  });
});
