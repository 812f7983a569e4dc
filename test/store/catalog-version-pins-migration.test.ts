import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PINS_PART_CHARS, readPinsText, readStoredPins } from '../../src/catalog/stored-pins.js';
import { migrateToLatest } from '../../src/db/migrate.js';
import type { ResourcePin } from '../../src/schemas/playbook.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';

/**
 * D30: the migration that stores a Catalog version's pins in parts moves every version's pins out of
 * `catalog_versions.pins`, cut as the service cuts them (never between the halves of a surrogate
 * pair), and drops the column: each version reads back exactly the text it had.
 */
describe('catalog versions whose pins were one value (D30)', () => {
  let backend: TestBackend;
  const at = '2026-01-01T00:00:00.000Z';
  const pin = (index: number, ref = `svc/big/résumé-${index}-✓`): ResourcePin => ({
    resourceId: `01900000-0000-7000-8000-${String(index).padStart(12, '0')}`,
    resourceHumanRef: ref,
    resourceVersionId: `01900001-0000-7000-8000-${String(index).padStart(12, '0')}`,
    version: '1.0.0',
    contentHash: 'c'.repeat(64),
  });
  /** Pins of more than three parts whose first cut falls inside an astral character. */
  function largePins(): ResourcePin[] {
    const rest = Array.from({ length: 1200 }, (_, i) => pin(i + 1));
    const at = JSON.stringify([pin(0, 'svc/big/😀'), ...rest]).indexOf('😀');
    const pins = [pin(0, `svc/big/${'a'.repeat(PINS_PART_CHARS - 1 - at)}😀`), ...rest];
    expect(JSON.stringify(pins).charCodeAt(PINS_PART_CHARS - 1)).toBe(0xd83d);
    return pins;
  }
  const versions = {
    'v-large': largePins(),
    'v-none': [],
    'v-one': [pin(7)],
  } as Record<string, ResourcePin[]>;

  beforeAll(async () => {
    backend = await createTestBackend({ migrateTo: '0010-key-successor' });
    const db = backend.databases.primary;
    for (const [id, pins] of Object.entries(versions)) {
      const catalogId = `c-${id}`;
      await sql`insert into catalogs (id, account_id, slug, name, status, created_at, updated_at)
        values (${catalogId}, null, ${catalogId}, 'C', 'active', ${at}, ${at})`.execute(db);
      await sql`insert into catalog_versions (id, catalog_id, version, pins, manifest_hash, resource_count, published_at, created_at)
        values (${id}, ${catalogId}, '1', ${JSON.stringify(pins)}, ${'m'.repeat(64)}, ${pins.length}, ${at}, ${at})`.execute(
        db,
      );
      await sql`update catalogs set current_version_id = ${id} where id = ${catalogId}`.execute(db);
    }
    await migrateToLatest(backend.databases);
  });
  afterAll(async () => {
    await backend?.cleanup();
  });

  it('reads every version back as it was, the large one in parts of the service size', async () => {
    const db = backend.databases.primary;
    for (const [id, pins] of Object.entries(versions)) {
      expect(await readPinsText(db, id)).toBe(JSON.stringify(pins));
      expect(await readStoredPins(db, id)).toEqual(pins);
    }
    const parts = await db
      .selectFrom('catalog_version_pins')
      .select(['version_id', 'part', 'json'])
      .where('version_id', '=', 'v-large')
      .orderBy('part')
      .execute();
    const text = JSON.stringify(versions['v-large']);
    expect(parts.length).toBeGreaterThan(3);
    expect(parts.map((row) => row.part)).toEqual(parts.map((_, index) => index));
    // The first cut moved back by one so that the astral character stays whole in the second part.
    expect(parts[0]!.json).toBe(text.slice(0, PINS_PART_CHARS - 1));
    expect(parts[1]!.json.startsWith('😀')).toBe(true);
    expect(parts.every((row) => row.json.length <= PINS_PART_CHARS)).toBe(true);
  });

  it('stores a version of no pins as one part, and drops the column', async () => {
    const db = backend.databases.primary;
    const none = await db
      .selectFrom('catalog_version_pins')
      .selectAll()
      .where('version_id', '=', 'v-none')
      .execute();
    expect(none).toEqual([{ version_id: 'v-none', part: 0, json: '[]' }]);
    const columns = (await db.introspection.getTables()).find(
      (table) => table.name === 'catalog_versions',
    )!.columns;
    expect(columns.map((column) => column.name)).not.toContain('pins');
  });
});
