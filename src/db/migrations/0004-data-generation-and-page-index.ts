import { type Kysely, sql } from 'kysely';
import type { Dialect } from '../tables.js';

/**
 * Two things the read path's answers from memory need.
 *
 * 1. `data_generation`: one row whose number every write of Catalog data increases in its own
 *    transaction. Instances compare it with the number their cached answers were made at (see
 *    catalog/data-generation.ts), so that an import made anywhere shows on every instance within a
 *    second.
 *
 * 2. A page of a Catalog's Resources by offset, read from one index alone. The page's ids are found
 *    first (catalog, then slug order, with the status that decides service-owned drafts, and the id
 *    itself), and only the rows of that page are read in full: the rows a deep page skips cost an
 *    index entry each rather than a row each. The unique (catalog_id, slug) constraint stays; it is
 *    what makes a slug unique.
 */
export async function up(db: Kysely<unknown>, dialect: Dialect): Promise<void> {
  await db.schema
    .createTable('data_generation')
    .addColumn('id', 'integer', (c) => c.primaryKey().check(sql`id = 1`))
    .addColumn('generation', 'integer', (c) => c.notNull())
    .execute();
  await sql`insert into data_generation (id, generation) values (1, 1)`.execute(db);
  await db.schema
    .createIndex('resources_catalog_slug_page')
    .on('resources')
    .columns(['catalog_id', 'slug', 'status', 'id'])
    .execute();
  await db.schema
    .createIndex('resources_catalog_kind_slug_page')
    .on('resources')
    .columns(['catalog_id', 'kind', 'slug', 'status', 'id'])
    .execute();
  await db.schema.dropIndex('resources_catalog_kind_slug_status').execute();
  // PostgreSQL answers an index-only scan from the index alone once the table's pages are marked
  // all-visible; statistics and that mark come from (auto)vacuum, which the import triggers as needed.
  if (dialect === 'postgres') await sql`analyze resources`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createIndex('resources_catalog_kind_slug_status')
    .on('resources')
    .columns(['catalog_id', 'kind', 'slug', 'status'])
    .execute();
  await db.schema.dropIndex('resources_catalog_kind_slug_page').execute();
  await db.schema.dropIndex('resources_catalog_slug_page').execute();
  await db.schema.dropTable('data_generation').execute();
}
