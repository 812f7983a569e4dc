import { type ColumnDefinitionBuilder, type Kysely, sql } from 'kysely';
import type { Dialect } from '../tables.js';

/**
 * D32: a key's restrictions (`api_keys.restrictions`), the canonical JSON text of its catalogs,
 * client addresses and rate; null for a key without any, as every key made before this column is.
 */
export async function up(db: Kysely<unknown>, dialect: Dialect): Promise<void> {
  const text = (column: ColumnDefinitionBuilder) =>
    dialect === 'postgres' ? column.modifyFront(sql`collate "C"`) : column;
  await db.schema.alterTable('api_keys').addColumn('restrictions', 'text', text).execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('api_keys').dropColumn('restrictions').execute();
}
