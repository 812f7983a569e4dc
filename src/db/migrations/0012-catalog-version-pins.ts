import { type ColumnDefinitionBuilder, type Kysely, sql } from 'kysely';
import { textParts } from '../../foundation/text-parts.js';
import type { Dialect } from '../tables.js';

/** Versions listed per statement, and characters of pins read per statement while moving them. */
const IDS_PER_READ = 1000;
const CHARS_PER_READ = 16 * 1024 * 1024;
/** Parts written per statement: a mebibyte or so of text. */
const PARTS_PER_INSERT = 16;
/** Characters per part, as the service writes them (any cut reads back the same text). */
const PART_CHARS = 64 * 1024;

/**
 * D30: a Catalog version's pins move from one text value (`catalog_versions.pins`, 20 MB for a version
 * of 100,000 Resources) to `catalog_version_pins`, one row per part of the same text, so that the text
 * is read a part at a time by key. A slice of one large value was read from the value's start every
 * time (SQLite loads it whole; PostgreSQL's `substr` of UTF-8 text fetches and decompresses it up to
 * the slice), so reading 20 MB a slice at a time took seconds on SQLite and ten on PostgreSQL. The
 * parts are cut as the service cuts them (catalog/stored-pins.ts), a few versions at a time.
 */
export async function up(db: Kysely<unknown>, dialect: Dialect): Promise<void> {
  const text = (column: ColumnDefinitionBuilder) =>
    dialect === 'postgres' ? column.modifyFront(sql`collate "C"`) : column;
  await db.schema
    .createTable('catalog_version_pins')
    .addColumn('version_id', 'text', (c) =>
      text(c).notNull().references('catalog_versions.id').onDelete('cascade'),
    )
    .addColumn('part', 'integer', (c) => c.notNull())
    .addColumn('json', 'text', (c) => text(c).notNull())
    .addPrimaryKeyConstraint('catalog_version_pins_pkey', ['version_id', 'part'])
    .execute();

  let after = '';
  for (;;) {
    const { rows: versions } = await sql<{ id: string; chars: number | string }>`
      select id, length(pins) as chars from catalog_versions
      where id > ${after} order by id limit ${IDS_PER_READ}`.execute(db);
    if (versions.length === 0) break;
    // As many versions per statement as make a few megabytes of pins (one, for a large one).
    let batch: string[] = [];
    let chars = 0;
    const move = async () => {
      if (batch.length === 0) return;
      const { rows } = await sql<{ id: string; pins: string }>`
        select id, pins from catalog_versions where id in (${sql.join(batch)})`.execute(db);
      for (const { id, pins } of rows) {
        const parts = textParts(pins, PART_CHARS).map((json, part) => ({ version_id: id, part, json }));
        for (let from = 0; from < parts.length; from += PARTS_PER_INSERT) {
          await db
            .insertInto('catalog_version_pins' as never)
            .values(parts.slice(from, from + PARTS_PER_INSERT) as never)
            .execute();
        }
      }
      batch = [];
      chars = 0;
    };
    for (const version of versions) {
      if (chars + Number(version.chars) > CHARS_PER_READ) await move();
      batch.push(version.id);
      chars += Number(version.chars);
    }
    await move();
    after = versions.at(-1)!.id;
  }
  await db.schema.alterTable('catalog_versions').dropColumn('pins').execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .alterTable('catalog_versions')
    .addColumn('pins', 'text', (c) => c.notNull().defaultTo('[]'))
    .execute();
  await sql`update catalog_versions set pins = coalesce((select string_agg(json, '' order by part)
    from catalog_version_pins where version_id = catalog_versions.id), '[]')`.execute(db);
  await db.schema.dropTable('catalog_version_pins').execute();
}
