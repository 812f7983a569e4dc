import { type RawBuilder, sql } from 'kysely';
import type { AppendedChanges } from '../changes/unit-of-work.js';
import { chunk, MAX_IN_LIST, rowsPerInsert } from '../db/batches.js';
import { deferredFlushTransaction } from '../db/deferred-flush.js';
import { type Db, dialectOf, type WebhookDeliveryRow, type WebhookEndpointRow } from '../db/tables.js';
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

/** Attempts kept per insert statement (10 values each). */
const ATTEMPTS_PER_INSERT = Math.min(500, rowsPerInsert(10));

const isPostgres = (db: Db) => dialectOf(db) === 'postgres';

const PENDING = sql.lit<'pending'>('pending');

/**
 * The deliveries as `d`, read on SQLite by the index of those pending by when they are due. Without
 * statistics SQLite's planner takes the index by status instead, and sorts every pending delivery to
 * find the first due: after a service import with 500 endpoints subscribed (50,000 deliveries) that
 * was a tenth of a second of the event loop for each look and each claim, a few per delivery made.
 * PostgreSQL's planner has its statistics. The index's condition must be written as it is, a literal
 * (PENDING), for SQLite to see that it holds.
 */
function deliveriesByDue(db: Db) {
  return sql<WebhookDeliveryRow>`webhook_deliveries`.as<'d'>(
    isPostgres(db) ? sql`d` : sql`d indexed by webhook_deliveries_due`,
  );
}

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

/**
 * When the first delivery to an enabled endpoint, not leased (or whose lease lapsed), is due: now or
 * earlier when one is due, undefined when none is pending. A cheap read by index, made before a claim,
 * which writes. What waits for a disabled endpoint is not due: a claim would find nothing to lease,
 * and every change committed would cost a transaction of the writer for it.
 */
export async function nextDueAt(db: Db, now: string): Promise<string | undefined> {
  const row = await db
    .selectFrom(deliveriesByDue(db))
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

/** What an attempt needs of its endpoint, read with the claim. */
export type EndpointOfDelivery = Pick<
  WebhookEndpointRow,
  'id' | 'account_id' | 'url' | 'secret_sealed' | 'secret_key_id' | 'failing_since'
>;

export interface ClaimedDelivery
  extends Pick<
    WebhookDeliveryRow,
    'id' | 'endpoint_id' | 'change_seq' | 'event_id' | 'event_type' | 'payload' | 'attempts'
  > {
  readonly endpoint: EndpointOfDelivery;
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
  /** When the delivery is due again; undefined when it succeeded or has no retry left. */
  readonly nextAttemptAt?: string | undefined;
}

/** Deliveries to lease: the oldest due first, within the instance's free slots and each endpoint's share. */
export interface ClaimRequest {
  readonly now: string;
  readonly leasedUntil: string;
  readonly token: string;
  /** The most deliveries leased (the instance's free slots). */
  readonly limit: number;
  /** The most attempts in flight at once from this instance to one endpoint not in `unbounded`. */
  readonly perEndpoint: number;
  /** Endpoints that may take any free slot (they answer quickly). */
  readonly unbounded: ReadonlySet<string>;
  /** This instance's attempts in flight, by endpoint. */
  readonly inFlight: ReadonlyMap<string, number>;
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
  /** Whether due deliveries were left for want of a free slot or of an endpoint's share. */
  readonly left: boolean;
}

/**
 * One turn of the dispatcher, in one transaction: keeps the attempts that ended and moves their
 * deliveries on (succeeded, due again, or failed), follows their endpoints' runs of failures, drops
 * what is not to be sent, and leases what is due. At a hundred events a second a delivery then costs a
 * share of one commit rather than two commits of its own, and on SQLite that commit does not wait for
 * the disk (see deferred-flush.ts): a power cut may take a turn back, and what it recorded is then sent
 * again, never lost, while every instance that could have held its leases went down with the machine.
 */
export async function takeDispatchTurn(db: Db, turn: DispatchTurn): Promise<DispatchTurnOutcome> {
  return deferredFlushTransaction(db, async (trx) => {
    const kept = await recordAttempts(trx, turn.attempts);
    await followEndpointRuns(trx, turn.attempts);
    for (const { deliveryId, token } of turn.drops) {
      await trx
        .deleteFrom('webhook_deliveries')
        .where('id', '=', deliveryId)
        .where('lease_token', '=', token)
        .execute();
    }
    const { claimed, left } = turn.claim ? await claimDue(trx, turn.claim) : { claimed: [], left: false };
    return { kept, claimed, left };
  });
}

/** Keeps each attempt; moves its delivery on only if this instance still holds the lease it was made under. */
async function recordAttempts(trx: Db, records: readonly AttemptRecord[]): Promise<boolean[]> {
  if (records.length === 0) return [];
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
    kept.push(Number(moved.numUpdatedRows) > 0);
  }
  return kept;
}

/**
 * A success ends an endpoint's run of failures; a failure starts one, at its time, unless one runs
 * already. Of an endpoint's attempts in one turn, the last decides, and the run starts at the first
 * failure after its last success.
 */
async function followEndpointRuns(trx: Db, records: readonly AttemptRecord[]): Promise<void> {
  const runs = new Map<string, string | null>();
  for (const record of records) {
    if (record.ok) runs.set(record.endpointId, null);
    else if (!runs.get(record.endpointId)) runs.set(record.endpointId, record.at);
  }
  const recovered = [...runs].filter(([, since]) => since === null).map(([id]) => id);
  if (recovered.length > 0) {
    await trx
      .updateTable('webhook_endpoints')
      .set({ failing_since: null })
      .where('id', 'in', recovered)
      .where('failing_since', 'is not', null)
      .execute();
  }
  for (const [endpointId, since] of runs) {
    if (since === null) continue;
    await trx
      .updateTable('webhook_endpoints')
      .set({ failing_since: since })
      .where('id', '=', endpointId)
      .where('failing_since', 'is', null)
      .execute();
  }
}

/** Due deliveries looked at per statement of a claim, beyond those it may lease. */
const CLAIM_WINDOW_FACTOR = 4;
/** Statements one claim makes at most while endpoints at their share hide what lies behind them. */
const CLAIM_ROUNDS = 8;

/**
 * Leases up to `limit` deliveries that are due, of enabled endpoints, oldest due first, until
 * `leasedUntil`, under `token`, and at most `perEndpoint` in flight per endpoint (counting this
 * instance's attempts in flight) unless the endpoint is `unbounded`: an endpoint that answers slowly
 * or fails holds that many slots, never all of them. On PostgreSQL rows another instance is claiming
 * are skipped (`SKIP LOCKED`); SQLite has one writer at a time. A lease that lapses (its instance
 * died, or hangs) makes the delivery due again, to any instance.
 *
 * The due deliveries are read oldest first, a window at a time; an endpoint whose share is taken is
 * left out of the next window, so that one endpoint's backlog never hides another's deliveries.
 */
async function claimDue(
  trx: Db,
  request: ClaimRequest,
): Promise<{ claimed: ClaimedDelivery[]; left: boolean }> {
  const { now, limit, perEndpoint, unbounded } = request;
  const share = new Map(request.inFlight);
  const shareOf = (endpointId: string) =>
    unbounded.has(endpointId) ? Number.POSITIVE_INFINITY : perEndpoint;
  const full = new Set([...share].filter(([id, n]) => n >= shareOf(id)).map(([id]) => id));
  const chosen: ClaimedDelivery[] = [];
  const window = Math.max(limit, 1) * CLAIM_WINDOW_FACTOR;
  let left = false;
  for (let round = 0; round < CLAIM_ROUNDS && chosen.length < limit; round++) {
    const taken = new Set(chosen.map((delivery) => delivery.id));
    const rows = await trx
      .selectFrom(deliveriesByDue(trx))
      .innerJoin('webhook_endpoints as e', (join) =>
        join.onRef('e.id', '=', 'd.endpoint_id').on('e.status', '=', 'enabled'),
      )
      .select([
        'd.id',
        'd.endpoint_id',
        'd.change_seq',
        'd.event_id',
        'd.event_type',
        'd.payload',
        'd.attempts',
        'e.account_id',
        'e.url',
        'e.secret_sealed',
        'e.secret_key_id',
        'e.failing_since',
      ])
      .where('d.status', '=', PENDING)
      .where('d.next_attempt_at', '<=', now)
      .where((eb) => eb.or([eb('d.leased_until', 'is', null), eb('d.leased_until', '<=', now)]))
      .$if(full.size > 0, (qb) => qb.where('d.endpoint_id', 'not in', [...full]))
      .$if(taken.size > 0, (qb) => qb.where('d.id', 'not in', [...taken]))
      .orderBy('d.next_attempt_at')
      .limit(window)
      .$if(isPostgres(trx), (qb) => qb.forUpdate('d').skipLocked())
      .execute();
    const fullBefore = full.size;
    for (const row of rows) {
      const held = share.get(row.endpoint_id) ?? 0;
      if (held >= shareOf(row.endpoint_id) || chosen.length >= limit) {
        left = true;
        continue;
      }
      share.set(row.endpoint_id, held + 1);
      if (held + 1 >= shareOf(row.endpoint_id)) full.add(row.endpoint_id);
      chosen.push({
        id: row.id,
        endpoint_id: row.endpoint_id,
        change_seq: row.change_seq,
        event_id: row.event_id,
        event_type: row.event_type,
        payload: row.payload,
        attempts: row.attempts,
        endpoint: {
          id: row.endpoint_id,
          account_id: row.account_id,
          url: row.url,
          secret_sealed: row.secret_sealed,
          secret_key_id: row.secret_key_id,
          failing_since: row.failing_since,
        },
      });
    }
    // The window held every due delivery there is, or what it left out is behind no endpoint that
    // filled up meanwhile: the next window would show nothing more to lease.
    if (rows.length < window || full.size === fullBefore) break;
  }
  if (chosen.length > 0) {
    await trx
      .updateTable('webhook_deliveries')
      .set({ leased_until: request.leasedUntil, lease_token: request.token })
      .where(
        'id',
        'in',
        chosen.map((delivery) => delivery.id),
      )
      .execute();
  }
  return { claimed: chosen, left };
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
