import { type RawBuilder, sql } from 'kysely';
import { type Db, dialectOf, type WebhookDeliveryRow } from '../db/tables.js';

/** What the outbox's statements share: the dialect, the pending literal, indexes, ids. */

export const isPostgres = (db: Db) => dialectOf(db) === 'postgres';

/**
 * `status = 'pending'` as a literal: SQLite uses a partial index only when the query's condition is
 * written as the index's is, never through a bound parameter.
 */
export const PENDING = sql.lit<'pending'>('pending');

/** The indexes of pending deliveries (migrations 0009 and 0014), each condition `status = 'pending'`. */
export type PendingIndex =
  /** By when they are due: what the whole outbox has due first. */
  | 'webhook_deliveries_due'
  /** By endpoint, then by when they are due: what one endpoint has due first. */
  | 'webhook_deliveries_pending_due'
  /** By endpoint, then by age: one endpoint's oldest. */
  | 'webhook_deliveries_pending_age';

/**
 * The deliveries as `d`, read on SQLite by the pending index named. Without statistics SQLite's
 * planner takes another index (the one by status, or the endpoint's with its finished deliveries of
 * 30 days) and sorts or walks what it did not need: after a service import with 500 endpoints
 * subscribed (50,000 deliveries) that was a tenth of a second of the event loop for each look and each
 * claim. PostgreSQL's planner has its statistics.
 */
export function deliveriesBy(db: Db, index: PendingIndex) {
  return sql<WebhookDeliveryRow>`webhook_deliveries`.as<'d'>(
    isPostgres(db) ? sql`d` : sql`d indexed by ${sql.raw(index)}`,
  );
}

/** A random id in UUID form, made by the database for each row of a set-based insert. */
export function newUuid(db: Db): RawBuilder<string> {
  return isPostgres(db)
    ? sql<string>`gen_random_uuid()::text`
    : sql<string>`lower(hex(randomblob(4))) || '-' || lower(hex(randomblob(2))) || '-4' ||
        substr(lower(hex(randomblob(2))), 2) || '-' || substr('89ab', 1 + (abs(random()) % 4), 1) ||
        substr(lower(hex(randomblob(2))), 2) || '-' || lower(hex(randomblob(6)))`;
}
