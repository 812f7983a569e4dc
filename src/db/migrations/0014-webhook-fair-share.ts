import { type ColumnDefinitionBuilder, type Kysely, sql } from 'kysely';
import type { Dialect } from '../tables.js';

/**
 * Webhook attempts shared fairly (docs/design.md, D28):
 *
 * - `webhook_endpoints.timeouts_in_a_row`: the run of timeouts that puts an endpoint to one attempt at
 *   a time with a short timeout; every instance reads it with the deliveries it claims.
 * - `webhook_endpoints.pending_deliveries`: how many of its deliveries are pending, kept in the same
 *   transaction as every change of one, so that the bound on them is checked without counting them.
 *   Filled here from the deliveries stored.
 * - `webhook_attempts.reason`: why an attempt failed, in one word (`backlog_exceeded` for a delivery
 *   given up unsent).
 * - Two indexes of the pending deliveries by endpoint: by when they are due, which a claim reads
 *   endpoint by endpoint, and by age, from which the oldest are failed past the bound. Only pending
 *   deliveries are in them, so that neither walks the finished ones of the last 30 days.
 */
export async function up(db: Kysely<unknown>, dialect: Dialect): Promise<void> {
  const text = (column: ColumnDefinitionBuilder) =>
    dialect === 'postgres' ? column.modifyFront(sql`collate "C"`) : column;
  await db.schema
    .alterTable('webhook_endpoints')
    .addColumn('timeouts_in_a_row', 'integer', (c) => c.notNull().defaultTo(0))
    .execute();
  await db.schema
    .alterTable('webhook_endpoints')
    .addColumn('pending_deliveries', 'integer', (c) => c.notNull().defaultTo(0))
    .execute();
  await sql`update webhook_endpoints set pending_deliveries = (
      select count(*) from webhook_deliveries d
        where d.endpoint_id = webhook_endpoints.id and d.status = 'pending')`.execute(db);
  await db.schema.alterTable('webhook_attempts').addColumn('reason', 'text', text).execute();
  await sql`create index webhook_deliveries_pending_due
    on webhook_deliveries (endpoint_id, next_attempt_at) where status = 'pending'`.execute(db);
  await sql`create index webhook_deliveries_pending_age
    on webhook_deliveries (endpoint_id, created_at, id) where status = 'pending'`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropIndex('webhook_deliveries_pending_age').execute();
  await db.schema.dropIndex('webhook_deliveries_pending_due').execute();
  await db.schema.alterTable('webhook_attempts').dropColumn('reason').execute();
  await db.schema.alterTable('webhook_endpoints').dropColumn('pending_deliveries').execute();
  await db.schema.alterTable('webhook_endpoints').dropColumn('timeouts_in_a_row').execute();
}
