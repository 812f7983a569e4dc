import { PostgresAdapter, type RawBuilder, sql } from 'kysely';
import type { AppendedChanges } from '../changes/unit-of-work.js';
import { deferredFlushTransaction } from '../db/deferred-flush.js';
import type { Db, WebhookDeliveryRow } from '../db/tables.js';
import { CHANGE_TYPES } from '../schemas/audit.js';
import { EVERY_EVENT, type WebhookDeliveryStatus } from '../schemas/webhooks.js';

/**
 * The webhook outbox (D28): what is due to each endpoint is written with the change that makes it
 * due, in the same transaction, so that no change is delivered that did not commit and none that did
 * is lost, whatever happens to the process after the commit. Delivering is another matter, for the
 * dispatcher (dispatcher.ts), which leases what is due.
 */

/** The changes of the service's own namespace that an account's endpoints receive. */
export const SERVICE_EVENT_TYPES = CHANGE_TYPES.filter(
  (type) => type.startsWith('catalog.') || type.startsWith('resource.'),
);

const isPostgres = (db: Db) => db.getExecutor().adapter instanceof PostgresAdapter;

/** A random id in UUID form, made by the database for each row of a set-based insert. */
function newUuid(db: Db): RawBuilder<string> {
  return isPostgres(db)
    ? sql<string>`gen_random_uuid()::text`
    : sql<string>`lower(hex(randomblob(4))) || '-' || lower(hex(randomblob(2))) || '-4' ||
        substr(lower(hex(randomblob(2))), 2) || '-' || substr('89ab', 1 + (abs(random()) % 4), 1) ||
        substr(lower(hex(randomblob(2))), 2) || '-' || lower(hex(randomblob(6)))`;
}

/**
 * Makes the changes just appended due to every enabled endpoint that takes them: an account's
 * endpoints take its own changes, and the service's Catalog and Resource changes. One statement per
 * append, whatever the number of changes or endpoints: the database joins the appended changes with
 * the subscriptions (by index) and inserts the deliveries itself.
 */
export async function enqueueDeliveries(trx: Db, appended: AppendedChanges): Promise<void> {
  const { firstSeq, lastSeq } = appended;
  const id = newUuid(trx);
  const columns = sql`${id}, s.endpoint_id, c.seq, c.id, c.type, 'pending', 0, c.at, c.at, c.at`;
  await sql`insert into webhook_deliveries
      (id, endpoint_id, change_seq, event_id, event_type, status, attempts, next_attempt_at, created_at, updated_at)
    select ${columns}
      from changes c
      join webhook_subscriptions s on s.account_id = c.namespace and s.event_type in (c.type, ${EVERY_EVENT})
      join webhook_endpoints e on e.id = s.endpoint_id and e.status = 'enabled'
      where c.seq between ${firstSeq} and ${lastSeq}
    union all
    select ${columns}
      from changes c
      join webhook_subscriptions s on s.event_type in (c.type, ${EVERY_EVENT})
      join webhook_endpoints e on e.id = s.endpoint_id and e.status = 'enabled'
      where c.seq between ${firstSeq} and ${lastSeq}
        and c.namespace = 'svc' and c.type in (${sql.join(SERVICE_EVENT_TYPES)})`.execute(trx);
}

/** Whether anything is due now: a cheap look before a claim, which writes. */
export async function anythingDue(db: Db, now: string): Promise<boolean> {
  const row = await db
    .selectFrom('webhook_deliveries')
    .select('id')
    .where('status', '=', 'pending')
    .where('next_attempt_at', '<=', now)
    .where((eb) => eb.or([eb('leased_until', 'is', null), eb('leased_until', '<=', now)]))
    .limit(1)
    .executeTakeFirst();
  return row !== undefined;
}

export type ClaimedDelivery = Pick<
  WebhookDeliveryRow,
  'id' | 'endpoint_id' | 'change_seq' | 'event_id' | 'event_type' | 'payload' | 'attempts'
>;

/**
 * Leases up to `limit` deliveries that are due, of enabled endpoints, oldest due first, until
 * `leasedUntil`, under `token`. On PostgreSQL rows another instance is claiming are skipped (`SKIP
 * LOCKED`); SQLite has one writer at a time. A lease that lapses (its instance died, or hangs) makes the
 * delivery due again, to any instance.
 *
 * A lease, like an attempt's outcome, is committed without waiting for the disk on SQLite
 * (deferred-flush.ts): a power cut may take it back, and the delivery is then made again, never lost.
 */
export async function claimDue(
  db: Db,
  options: { now: string; leasedUntil: string; token: string; limit: number },
): Promise<ClaimedDelivery[]> {
  const { now, leasedUntil, token, limit } = options;
  const skipLocked = isPostgres(db) ? sql`for update of d skip locked` : sql``;
  return deferredFlushTransaction(db, async (trx) => {
    const result = await sql<ClaimedDelivery>`update webhook_deliveries
    set leased_until = ${leasedUntil}, lease_token = ${token}
    where id in (
      select d.id from webhook_deliveries d
        join webhook_endpoints e on e.id = d.endpoint_id and e.status = 'enabled'
        where d.status = 'pending' and d.next_attempt_at <= ${now}
          and (d.leased_until is null or d.leased_until <= ${now})
        order by d.next_attempt_at
        limit ${limit}
        ${skipLocked}
    )
    returning id, endpoint_id, change_seq, event_id, event_type, payload, attempts`.execute(trx);
    return result.rows;
  });
}

/** What one attempt came to, as the delivery list keeps it. */
export interface AttemptRecord {
  readonly id: string;
  readonly deliveryId: string;
  readonly endpointId: string;
  readonly attempt: number;
  readonly at: string;
  readonly ok: boolean;
  readonly statusCode?: number | undefined;
  readonly durationMs: number;
  readonly error?: string | undefined;
  /** When the delivery is due again; undefined when it succeeded or has no retry left. */
  readonly nextAttemptAt?: string | undefined;
}

/**
 * Keeps attempts and moves their deliveries on (succeeded, due again, or failed), in one transaction
 * for all of them: at a hundred events a second, one commit for a batch rather than two per attempt,
 * and on SQLite one that does not wait for the disk (deferred-flush.ts): a power cut may take it back,
 * and what it recorded is then sent again, never lost. Each attempt is kept in any case; its delivery
 * is moved only if this instance still holds its lease (`token`). Returns, per record, whether it was.
 */
export async function recordAttempts(
  db: Db,
  records: readonly (AttemptRecord & { readonly token: string })[],
): Promise<boolean[]> {
  if (records.length === 0) return [];
  return deferredFlushTransaction(db, async (trx) => {
    await trx
      .insertInto('webhook_attempts')
      .values(
        records.map((record) => ({
          id: record.id,
          delivery_id: record.deliveryId,
          endpoint_id: record.endpointId,
          attempt: record.attempt,
          at: record.at,
          outcome: record.ok ? ('succeeded' as const) : ('failed' as const),
          status_code: record.statusCode ?? null,
          duration_ms: record.durationMs,
          error: record.error ?? null,
          next_attempt_at: record.nextAttemptAt ?? null,
        })),
      )
      .execute();
    const kept: boolean[] = [];
    for (const record of records) {
      const status: WebhookDeliveryStatus = record.ok
        ? 'succeeded'
        : record.nextAttemptAt === undefined
          ? 'failed'
          : 'pending';
      const moved = await trx
        .updateTable('webhook_deliveries')
        .set({
          status,
          attempts: record.attempt,
          next_attempt_at: record.nextAttemptAt ?? record.at,
          leased_until: null,
          lease_token: null,
          updated_at: record.at,
        })
        .where('id', '=', record.deliveryId)
        .where('lease_token', '=', record.token)
        .executeTakeFirst();
      kept.push(Number(moved.numUpdatedRows) > 0);
    }
    return kept;
  });
}

/** Lets go of a lease without an attempt (the delivery is due again at once, to anyone). */
export async function releaseLease(db: Db, deliveryId: string, token: string): Promise<void> {
  await db
    .updateTable('webhook_deliveries')
    .set({ leased_until: null, lease_token: null })
    .where('id', '=', deliveryId)
    .where('lease_token', '=', token)
    .execute();
}

/** Drops a delivery that is not to be made (its event is not the account's to see, or is gone). */
export async function dropDelivery(db: Db, deliveryId: string, token: string): Promise<void> {
  await db
    .deleteFrom('webhook_deliveries')
    .where('id', '=', deliveryId)
    .where('lease_token', '=', token)
    .execute();
}

/** The age in seconds of the oldest delivery due to an enabled endpoint and not yet made; 0 if none. */
export async function oldestPendingAgeSeconds(db: Db, nowMs: number): Promise<number> {
  const row = await db
    .selectFrom('webhook_deliveries as d')
    .innerJoin('webhook_endpoints as e', 'e.id', 'd.endpoint_id')
    .select((eb) => eb.fn.min('d.created_at').as('oldest'))
    .where('d.status', '=', 'pending')
    .where('e.status', '=', 'enabled')
    .executeTakeFirst();
  const oldest = row?.oldest;
  return typeof oldest === 'string' ? Math.max(0, (nowMs - Date.parse(oldest)) / 1000) : 0;
}

/** Forgets finished deliveries and attempts older than `before`: a delivery list goes back so far. */
export async function pruneFinished(db: Db, before: string, batch = 1000): Promise<number> {
  const attempts = await db
    .deleteFrom('webhook_attempts')
    .where('id', 'in', (eb) =>
      eb.selectFrom('webhook_attempts').select('id').where('at', '<', before).limit(batch),
    )
    .executeTakeFirst();
  const deliveries = await db
    .deleteFrom('webhook_deliveries')
    .where('id', 'in', (eb) =>
      eb
        .selectFrom('webhook_deliveries')
        .select('id')
        .where('status', '<>', 'pending')
        .where('updated_at', '<', before)
        .limit(batch),
    )
    .executeTakeFirst();
  return Number(attempts.numDeletedRows) + Number(deliveries.numDeletedRows);
}
