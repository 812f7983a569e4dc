import { type ColumnDefinitionBuilder, type Kysely, sql } from 'kysely';
import type { Dialect } from '../tables.js';

/**
 * Webhooks (docs/design.md, D28): an account's endpoints, the change types each subscribes to, what is
 * due to each (one delivery per endpoint and change, written in the change's own transaction: the
 * outbox), and every attempt made.
 *
 * - `webhook_endpoints.secret_sealed` is the signing secret sealed under a deployment key
 *   (`secret_key_id` names which): the service must sign with it, so it cannot be a hash.
 * - `webhook_subscriptions` holds one row per endpoint and type (`*` for every type), with the
 *   endpoint's account, so that the outbox's insert finds an account's subscribers by index.
 * - A delivery is due when `pending` and `next_attempt_at` has passed; an instance leases it
 *   (`leased_until`, `lease_token`) for its attempt, and another takes it over when the lease lapses.
 */
export async function up(db: Kysely<unknown>, dialect: Dialect): Promise<void> {
  const text = (column: ColumnDefinitionBuilder) =>
    dialect === 'postgres' ? column.modifyFront(sql`collate "C"`) : column;
  await db.schema
    .createTable('webhook_endpoints')
    .addColumn('id', 'text', (c) => text(c).primaryKey())
    .addColumn('account_id', 'text', (c) => text(c).notNull().references('accounts.id'))
    .addColumn('url', 'text', (c) => text(c).notNull())
    // JSON array of change types, or ["*"].
    .addColumn('events', 'text', (c) => text(c).notNull())
    .addColumn('description', 'text', text)
    .addColumn('status', 'text', (c) => text(c).notNull())
    .addColumn('secret_sealed', 'text', (c) => text(c).notNull())
    .addColumn('secret_key_id', 'text', (c) => text(c).notNull())
    .addColumn('created_at', 'text', (c) => text(c).notNull())
    .addColumn('updated_at', 'text', (c) => text(c).notNull())
    // When its attempts began to fail without a success since: five days of it disable the endpoint.
    .addColumn('failing_since', 'text', (c) => text(c))
    .execute();
  await db.schema
    .createIndex('webhook_endpoints_account_created')
    .on('webhook_endpoints')
    .columns(['account_id', 'created_at', 'id'])
    .execute();

  await db.schema
    .createTable('webhook_subscriptions')
    .addColumn('endpoint_id', 'text', (c) =>
      text(c).notNull().references('webhook_endpoints.id').onDelete('cascade'),
    )
    .addColumn('account_id', 'text', (c) => text(c).notNull())
    .addColumn('event_type', 'text', (c) => text(c).notNull())
    .addPrimaryKeyConstraint('webhook_subscriptions_pk', ['endpoint_id', 'event_type'])
    .execute();
  // An account's subscribers of a type (its own changes), and every subscriber of a type (svc's).
  await db.schema
    .createIndex('webhook_subscriptions_account_type')
    .on('webhook_subscriptions')
    .columns(['account_id', 'event_type', 'endpoint_id'])
    .execute();
  await db.schema
    .createIndex('webhook_subscriptions_type')
    .on('webhook_subscriptions')
    .columns(['event_type', 'endpoint_id'])
    .execute();

  await db.schema
    .createTable('webhook_deliveries')
    .addColumn('id', 'text', (c) => text(c).primaryKey())
    .addColumn('endpoint_id', 'text', (c) =>
      text(c).notNull().references('webhook_endpoints.id').onDelete('cascade'),
    )
    // The change delivered; null for a test event, whose body is kept in `payload`.
    .addColumn('change_seq', dialect === 'postgres' ? 'bigint' : 'integer')
    // The event's id (the change's), sent as `webhook-id` on every attempt.
    .addColumn('event_id', 'text', (c) => text(c).notNull())
    .addColumn('event_type', 'text', (c) => text(c).notNull())
    .addColumn('payload', 'text', text)
    // pending, succeeded or failed.
    .addColumn('status', 'text', (c) => text(c).notNull())
    .addColumn('attempts', 'integer', (c) => c.notNull())
    .addColumn('next_attempt_at', 'text', (c) => text(c).notNull())
    .addColumn('leased_until', 'text', (c) => text(c))
    .addColumn('lease_token', 'text', text)
    .addColumn('created_at', 'text', (c) => text(c).notNull())
    .addColumn('updated_at', 'text', (c) => text(c).notNull())
    .execute();
  // What is due, in order; finished deliveries are not in it.
  await sql`create index webhook_deliveries_due on webhook_deliveries (next_attempt_at) where status = 'pending'`.execute(
    db,
  );
  await db.schema
    .createIndex('webhook_deliveries_endpoint')
    .on('webhook_deliveries')
    .columns(['endpoint_id', 'created_at'])
    .execute();
  await db.schema
    .createIndex('webhook_deliveries_finished')
    .on('webhook_deliveries')
    .columns(['status', 'updated_at'])
    .execute();

  await db.schema
    .createTable('webhook_attempts')
    .addColumn('id', 'text', (c) => text(c).primaryKey())
    .addColumn('delivery_id', 'text', (c) =>
      text(c).notNull().references('webhook_deliveries.id').onDelete('cascade'),
    )
    .addColumn('endpoint_id', 'text', (c) => text(c).notNull())
    .addColumn('attempt', 'integer', (c) => c.notNull())
    .addColumn('at', 'text', (c) => text(c).notNull())
    // succeeded or failed.
    .addColumn('outcome', 'text', (c) => text(c).notNull())
    .addColumn('status_code', 'integer')
    .addColumn('duration_ms', 'integer', (c) => c.notNull())
    .addColumn('error', 'text', text)
    .addColumn('next_attempt_at', 'text', (c) => text(c))
    .execute();
  // An endpoint's attempts, newest first.
  await db.schema
    .createIndex('webhook_attempts_endpoint_at')
    .on('webhook_attempts')
    .columns(['endpoint_id', 'at', 'id'])
    .execute();
  await db.schema
    .createIndex('webhook_attempts_delivery')
    .on('webhook_attempts')
    .column('delivery_id')
    .execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  for (const table of [
    'webhook_attempts',
    'webhook_deliveries',
    'webhook_subscriptions',
    'webhook_endpoints',
  ]) {
    await db.schema.dropTable(table).ifExists().execute();
  }
}
