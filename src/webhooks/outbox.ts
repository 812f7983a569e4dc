import { type RawBuilder, sql } from 'kysely';
import type { AppendedChanges, AppendHook, CommitHook } from '../changes/unit-of-work.js';
import { chunk, MAX_IN_LIST, rowsPerInsert } from '../db/batches.js';
import { deferredFlushTransaction } from '../db/deferred-flush.js';
import type { Db } from '../db/tables.js';
import { CHANGE_TYPES } from '../schemas/audit.js';
import { EVERY_EVENT, type WebhookDeliveryStatus } from '../schemas/webhooks.js';
import { type ClaimedDelivery, type ClaimRequest, claimDue, SLOW_AFTER_TIMEOUTS } from './claim.js';
import { deliveriesBy, newUuid, PENDING } from './delivery-rows.js';
import type { PendingBound } from './pending-bound.js';
import type { AttemptFailure } from './webhook-request.js';

/**
 * The webhook outbox (D28): what is due to each endpoint is written with the change that makes it
 * due, in the same transaction, so that no change is delivered that did not commit and none that did
 * is lost, whatever happens to the process after the commit. Delivering is another matter, for the
 * dispatcher (dispatcher.ts), which leases what is due (claim.ts).
 */

/** The changes of the service's own namespace that an account's endpoints receive. */
export const SERVICE_EVENT_TYPES = CHANGE_TYPES.filter(
  (type) => type.startsWith('catalog.') || type.startsWith('resource.'),
);

/** Attempts kept per insert statement (11 values each). */
const ATTEMPTS_PER_INSERT = Math.min(500, rowsPerInsert(11));

/**
 * `columns` of each pair of an appended change and an enabled endpoint that takes it: an account's
 * endpoints take its own changes, and the service's Catalog and Resource changes. The database joins
 * the appended changes with the subscriptions, by index.
 */
function subscribed(columns: RawBuilder<unknown>, { firstSeq, lastSeq }: AppendedChanges) {
  return sql`select ${columns}
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
        and c.namespace = 'svc' and c.type in (${sql.join(SERVICE_EVENT_TYPES)})`;
}

/** What a write's deliveries add to its endpoints' pending counts, gathered until it commits. */
export interface DeliveryOutbox {
  /** Makes the changes just appended due to every enabled endpoint that takes them. */
  readonly afterAppend: AppendHook;
  /** Adds what the write made due to each endpoint's pending count, and bounds it. */
  readonly beforeCommitting: CommitHook;
}

/**
 * The hooks of the unit of work that make changes due (D28): one set-based insert per append, whatever
 * the number of changes or endpoints, and what each endpoint was given counted; then, once, just
 * before the write commits, the counts added to the endpoints' rows, past whose bound their oldest fail
 * (pending-bound.ts). The endpoints' rows are locked for the commit only, so that the dispatcher's
 * turns, which update them too, never wait out a long write.
 */
export function deliveryOutbox(bound: PendingBound): DeliveryOutbox {
  // By transaction: a write tried again starts from nothing.
  const added = new WeakMap<Db, Map<string, number>>();
  return {
    afterAppend: async (trx, appended) => {
      const id = newUuid(trx);
      const columns = sql`${id}, s.endpoint_id, c.seq, c.id, c.type, 'pending', 0, c.at, c.at, c.at`;
      const inserted = await sql`insert into webhook_deliveries
          (id, endpoint_id, change_seq, event_id, event_type, status, attempts, next_attempt_at, created_at, updated_at)
        ${subscribed(columns, appended)}`.execute(trx);
      if (Number(inserted.numAffectedRows ?? 0) === 0) return;
      const { rows } = await sql<{
        endpoint_id: string;
        n: number | string;
      }>`select endpoint_id, count(*) as n
        from (${subscribed(sql`s.endpoint_id`, appended)}) due group by endpoint_id`.execute(trx);
      const counts = added.get(trx) ?? new Map<string, number>();
      for (const row of rows) counts.set(row.endpoint_id, (counts.get(row.endpoint_id) ?? 0) + Number(row.n));
      added.set(trx, counts);
    },
    beforeCommitting: async (trx) => {
      const counts = added.get(trx);
      if (counts === undefined) return;
      added.delete(trx);
      await bound.add(trx, counts);
    },
  };
}

/**
 * When the first delivery to an enabled endpoint, not leased (or whose lease lapsed), is due: now or
 * earlier when one is due, undefined when none is pending. A cheap read by index, made before a claim,
 * which writes. What waits for a disabled endpoint is not due: a claim would find nothing to lease,
 * and every change committed would cost a transaction of the writer for it.
 */
export async function nextDueAt(db: Db, now: string): Promise<string | undefined> {
  const row = await db
    .selectFrom(deliveriesBy(db, 'webhook_deliveries_due'))
    .innerJoin('webhook_endpoints as e', (join) =>
      join.onRef('e.id', '=', 'd.endpoint_id').on('e.status', '=', 'enabled'),
    )
    .select('d.next_attempt_at')
    .where('d.status', '=', PENDING)
    .where((eb) => eb.or([eb('d.leased_until', 'is', null), eb('d.leased_until', '<=', now)]))
    .orderBy('d.next_attempt_at')
    .limit(1)
    .executeTakeFirst();
  return row?.next_attempt_at;
}

/** A delivery this instance leased, named by the lease's token. */
export interface Lease {
  readonly deliveryId: string;
  readonly token: string;
}

/** What one attempt came to, as the delivery list keeps it. */
export interface AttemptRecord {
  readonly id: string;
  readonly deliveryId: string;
  readonly endpointId: string;
  /** The lease the attempt was made under: its delivery moves on only if that lease is still held. */
  readonly token: string;
  readonly attempt: number;
  readonly at: string;
  readonly ok: boolean;
  readonly statusCode?: number | undefined;
  readonly durationMs: number;
  readonly error?: string | undefined;
  /** Why it failed, in one word; undefined when it succeeded. */
  readonly reason?: AttemptFailure | undefined;
  /** When the delivery is due again; undefined when it succeeded or has no retry left. */
  readonly nextAttemptAt?: string | undefined;
}

/** What the dispatcher writes in one of its turns: all of it in one transaction. */
export interface DispatchTurn {
  /** Attempts that ended since the last turn. */
  readonly attempts: readonly AttemptRecord[];
  /** Leased deliveries not to be made (their event is not the account's to see, or is gone). */
  readonly drops: readonly Lease[];
  /** Deliveries to lease, when any may be due and a slot is free. */
  readonly claim?: ClaimRequest | undefined;
}

export interface DispatchTurnOutcome {
  /** Per attempt, whether this instance still held its lease (its delivery moved on). */
  readonly kept: readonly boolean[];
  readonly claimed: readonly ClaimedDelivery[];
  /** Whether due deliveries were left for want of a free slot or of an endpoint's or an account's share. */
  readonly left: boolean;
}

/**
 * One turn of the dispatcher, in one transaction: keeps the attempts that ended and moves their
 * deliveries on (succeeded, due again, or failed), follows their endpoints (runs of failures and of
 * timeouts, what is pending), drops what is not to be sent, and leases what is due. At a hundred
 * events a second a delivery then costs a share of one commit rather than two commits of its own, and
 * on SQLite that commit does not wait for the disk (see deferred-flush.ts): a power cut may take a
 * turn back, and what it recorded is then sent again, never lost, while every instance that could
 * have held its leases went down with the machine.
 */
export async function takeDispatchTurn(db: Db, turn: DispatchTurn): Promise<DispatchTurnOutcome> {
  return deferredFlushTransaction(db, async (trx) => {
    const { kept, finished } = await recordAttempts(trx, turn.attempts);
    for (const { deliveryId, token } of turn.drops) {
      const dropped = await trx
        .deleteFrom('webhook_deliveries')
        .where('id', '=', deliveryId)
        .where('lease_token', '=', token)
        .returning('endpoint_id')
        .executeTakeFirst();
      if (dropped) finished.set(dropped.endpoint_id, (finished.get(dropped.endpoint_id) ?? 0) + 1);
    }
    await followEndpoints(trx, turn.attempts, finished);
    const { claimed, left } = turn.claim ? await claimDue(trx, turn.claim) : { claimed: [], left: false };
    return { kept, claimed, left };
  });
}

/**
 * Keeps each attempt; moves its delivery on only if this instance still holds the lease it was made
 * under. Says which were kept, and how many deliveries of each endpoint are no longer pending.
 */
async function recordAttempts(
  trx: Db,
  records: readonly AttemptRecord[],
): Promise<{ kept: boolean[]; finished: Map<string, number> }> {
  const finished = new Map<string, number>();
  if (records.length === 0) return { kept: [], finished };
  // A delivery deleted meanwhile (with its endpoint) takes its attempts with it: none is kept for it.
  const existing = new Set<string>();
  for (const ids of chunk([...new Set(records.map((record) => record.deliveryId))], MAX_IN_LIST)) {
    const rows = await trx.selectFrom('webhook_deliveries').select('id').where('id', 'in', ids).execute();
    for (const row of rows) existing.add(row.id);
  }
  const kept: boolean[] = [];
  for (const slice of chunk(
    records.filter((record) => existing.has(record.deliveryId)),
    ATTEMPTS_PER_INSERT,
  )) {
    await trx
      .insertInto('webhook_attempts')
      .values(
        slice.map((record) => ({
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
          reason: record.reason ?? null,
        })),
      )
      .execute();
  }
  for (const record of records) {
    if (!existing.has(record.deliveryId)) {
      kept.push(false);
      continue;
    }
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
    const wasMoved = Number(moved.numUpdatedRows) > 0;
    kept.push(wasMoved);
    if (wasMoved && status !== 'pending') {
      finished.set(record.endpointId, (finished.get(record.endpointId) ?? 0) + 1);
    }
  }
  return { kept, finished };
}

/**
 * Follows each endpoint that attempts ended for, or whose deliveries stopped being pending, with one
 * statement each, in the order of their ids (as the outbox's insert locks them on PostgreSQL):
 *
 * - its run of failures: a success ends it; a failure starts one, at its time, unless one runs;
 * - its run of timeouts (`timeouts_in_a_row`): a timeout adds one, a 2xx ends it, another failure
 *   ends it unless it has reached `SLOW_AFTER_TIMEOUTS` (only a 2xx ends that);
 * - its pending count, less what finished.
 *
 * Of an endpoint's attempts in one turn, each counts in the order they ended.
 */
async function followEndpoints(
  trx: Db,
  records: readonly AttemptRecord[],
  finished: ReadonlyMap<string, number>,
): Promise<void> {
  const outcomes = new Map<string, AttemptRecord[]>();
  for (const record of records)
    outcomes.set(record.endpointId, [...(outcomes.get(record.endpointId) ?? []), record]);
  const ids = [...new Set([...outcomes.keys(), ...finished.keys()])].sort();
  for (const id of ids) {
    const ended = outcomes.get(id) ?? [];
    const done = finished.get(id) ?? 0;
    await trx
      .updateTable('webhook_endpoints')
      .set((eb) => ({
        ...(ended.length === 0
          ? {}
          : { failing_since: failingSince(ended), timeouts_in_a_row: timeoutRun(ended) }),
        ...(done === 0 ? {} : { pending_deliveries: eb('pending_deliveries', '-', done) }),
      }))
      .where('id', '=', id)
      .execute();
  }
}

/** The endpoint's run of failures after `ended`: from its first failure since its last success. */
function failingSince(ended: readonly AttemptRecord[]) {
  const lastSuccess = ended.findLastIndex((record) => record.ok);
  const firstFailure = ended.slice(lastSuccess + 1)[0]?.at;
  if (lastSuccess >= 0) return firstFailure ?? null;
  return sql<string>`coalesce(failing_since, ${firstFailure ?? null})`;
}

/**
 * The endpoint's run of timeouts after `ended`, as a value or, when none of them succeeded, as what
 * it becomes from each run it may have had before (below the threshold a failure other than a timeout
 * ends it; from there only a 2xx does).
 */
function timeoutRun(ended: readonly AttemptRecord[]) {
  const after = (start: number) =>
    ended.reduce(
      (run, record) =>
        record.ok ? 0 : record.reason === 'timeout' ? run + 1 : run >= SLOW_AFTER_TIMEOUTS ? run : 0,
      start,
    );
  if (ended.some((record) => record.ok)) return after(0);
  const timeouts = ended.filter((record) => record.reason === 'timeout').length;
  const below = Array.from(
    { length: SLOW_AFTER_TIMEOUTS },
    (_, start) => sql`when ${start} then cast(${after(start)} as integer)`,
  );
  return sql<number>`case when timeouts_in_a_row >= ${SLOW_AFTER_TIMEOUTS} then timeouts_in_a_row + ${timeouts}
    else case timeouts_in_a_row ${sql.join(below, sql` `)} else 0 end end`;
}

/** The age in seconds of the oldest delivery due to an enabled endpoint and not yet made; 0 if none. */
export async function oldestPendingAgeSeconds(db: Db, nowMs: number): Promise<number> {
  const row = await db
    .selectFrom('webhook_deliveries as d')
    .innerJoin('webhook_endpoints as e', 'e.id', 'd.endpoint_id')
    .select((eb) => eb.fn.min('d.created_at').as('oldest'))
    .where('d.status', '=', PENDING)
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
