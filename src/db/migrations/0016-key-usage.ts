import { type ColumnDefinitionBuilder, type Kysely, sql } from 'kysely';
import type { Dialect } from '../tables.js';

/**
 * D32: how each key is used.
 *
 * - `api_key_usage`: one row per key and hour in which it answered anything, with the count of each
 *   outcome; instances add their counts to the row as they flush them (at most once a minute), so
 *   that a row holds every instance's. Rows older than 90 days are deleted. No foreign key: a key is
 *   never deleted, and a flush must not wait on the key's row.
 * - `api_keys.last_used_address`: the client address of the key's last use, beside `last_used_at`.
 */
export async function up(db: Kysely<unknown>, dialect: Dialect): Promise<void> {
  const text = (column: ColumnDefinitionBuilder) =>
    dialect === 'postgres' ? column.modifyFront(sql`collate "C"`) : column;
  const count = (column: ColumnDefinitionBuilder) => column.notNull().defaultTo(0);
  await db.schema.alterTable('api_keys').addColumn('last_used_address', 'text', text).execute();
  await db.schema
    .createTable('api_key_usage')
    .addColumn('key_id', 'text', (c) => text(c).notNull())
    .addColumn('bucket_start', 'text', (c) => text(c).notNull())
    .addColumn('success', 'bigint', count)
    .addColumn('client_error', 'bigint', count)
    .addColumn('unauthorized', 'bigint', count)
    .addColumn('rate_limited', 'bigint', count)
    .addColumn('server_error', 'bigint', count)
    .addPrimaryKeyConstraint('api_key_usage_pkey', ['key_id', 'bucket_start'])
    .execute();
  await db.schema.createIndex('api_key_usage_by_start').on('api_key_usage').column('bucket_start').execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropTable('api_key_usage').execute();
  await db.schema.alterTable('api_keys').dropColumn('last_used_address').execute();
}
