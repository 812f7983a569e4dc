import { type ColumnDefinitionBuilder, type Kysely, sql } from 'kysely';
import type { Dialect } from '../tables.js';

// The audit trail of D23: one row per write of an account's Catalogs and per key event (D22). Rows are
// only ever inserted. Text columns compare byte by byte on PostgreSQL too (see 0003).
export async function up(db: Kysely<unknown>, dialect: Dialect): Promise<void> {
  const text = (column: ColumnDefinitionBuilder) =>
    dialect === 'postgres' ? column.modifyFront(sql`collate "C"`) : column;
  await db.schema
    .createTable('audit_events')
    // UUID v7: ordered by creation.
    .addColumn('id', 'text', (c) => text(c).primaryKey())
    .addColumn('at', 'text', (c) => text(c).notNull())
    .addColumn('account_id', 'text', (c) => text(c).notNull())
    // `api-key` or `user` (D23), or `operator` and `leak-report` for what no caller of the API did.
    .addColumn('actor_type', 'text', (c) => text(c).notNull())
    .addColumn('actor_id', 'text', (c) => text(c))
    .addColumn('action', 'text', (c) => text(c).notNull())
    .addColumn('target', 'text', (c) => text(c).notNull())
    .addColumn('request_id', 'text', (c) => text(c))
    .addColumn('summary', 'text', (c) => text(c).notNull())
    .execute();
  // An account's events, newest first, for the list operation.
  await db.schema
    .createIndex('audit_events_account_at')
    .on('audit_events')
    .columns(['account_id', 'at', 'id'])
    .execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropTable('audit_events').ifExists().execute();
}
