import { type Kysely, sql } from 'kysely';
import type { Dialect } from '../tables.js';

/**
 * Two things the list queries need on a large catalog, on both dialects.
 *
 * 1. Byte order on PostgreSQL. SQLite compares text byte by byte; a PostgreSQL database usually has a
 *    locale-aware default collation (en_US.UTF-8 skips hyphens: `a-c` sorts after `ab`), which would
 *    change the order of every list (D3) and could not serve `order by … collate "C"` from an index.
 *    Every text column of the service's tables therefore gets the "C" collation, so that comparison,
 *    ordering and the indexes built on them are byte-wise whatever the database's default. A table
 *    created by a later migration names `collate "C"` on its own text columns for the same reason.
 *
 * 2. Counting a catalog's visible Resources from the index alone. A page costs one query for its rows
 *    and one count (D3); the count filters on `status` (drafts), which no index held, so PostgreSQL
 *    read the whole table once a catalog was a sizeable part of it. The kind-and-slug index gains
 *    `status` as a trailing key column: the count becomes an index-only scan, and the kind-filtered
 *    page still reads that index in slug order.
 */
export async function up(db: Kysely<unknown>, dialect: Dialect): Promise<void> {
  if (dialect === 'postgres') await setCollation(db, 'C');
  await db.schema
    .createIndex('resources_catalog_kind_slug_status')
    .on('resources')
    .columns(['catalog_id', 'kind', 'slug', 'status'])
    .execute();
  await db.schema.dropIndex('resources_catalog_kind_slug').execute();
}

export async function down(db: Kysely<unknown>, dialect: Dialect): Promise<void> {
  await db.schema
    .createIndex('resources_catalog_kind_slug')
    .on('resources')
    .columns(['catalog_id', 'kind', 'slug'])
    .execute();
  await db.schema.dropIndex('resources_catalog_kind_slug_status').execute();
  if (dialect === 'postgres') await setCollation(db, 'default');
}

/** Sets `collation` on every text column of the service's tables (not on Kysely's own bookkeeping). */
async function setCollation(db: Kysely<unknown>, collation: 'C' | 'default'): Promise<void> {
  const columns = await sql<{ table_name: string; column_name: string }>`
    select c.table_name, c.column_name
    from information_schema.columns c
    join information_schema.tables t on t.table_schema = c.table_schema and t.table_name = c.table_name
    where c.table_schema = current_schema()
      and t.table_type = 'BASE TABLE'
      and c.data_type = 'text'
      and c.table_name not like 'kysely\\_%'
    order by c.table_name, c.ordinal_position`.execute(db);
  const byTable = new Map<string, string[]>();
  for (const { table_name, column_name } of columns.rows) {
    byTable.set(table_name, [...(byTable.get(table_name) ?? []), column_name]);
  }
  for (const [table, names] of byTable) {
    // One statement per table, so that its indexes are rebuilt once.
    const changes = names.map(
      (name) => sql`alter column ${sql.id(name)} type text collate ${sql.id(collation)}`,
    );
    await sql`alter table ${sql.id(table)} ${sql.join(changes)}`.execute(db);
  }
}
