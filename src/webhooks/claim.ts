import { sql } from 'kysely';
import type { Db, WebhookDeliveryRow, WebhookEndpointRow } from '../db/tables.js';
import { deliveriesBy, isPostgres, PENDING } from './delivery-rows.js';

/**
 * Which due deliveries an instance leases in a turn (D28), so that attempts are shared fairly:
 *
 * - between accounts: the accounts with deliveries due take turns, one delivery each, the account this
 *   instance served longest ago first; while another account has deliveries waiting, one account
 *   holds at most `perAccount` of the instance's attempts (half its slots, at least one), in flight
 *   and leased together. An account alone with deliveries due may use every slot.
 * - between an account's endpoints: they take turns too, the one with the oldest delivery due first;
 *   each holds at most `perEndpoint` attempts of this instance, any free slot when it answers quickly
 *   (`unbounded`), and one when its last attempts timed out (`SLOW_AFTER_TIMEOUTS` in a row, which
 *   every instance reads from its row), until a 2xx.
 *
 * A claim reads the endpoints that have pending deliveries, one index seek each (a loose scan of the
 * index of pending deliveries by endpoint), with when each has one due first; then, endpoint by
 * endpoint as their turns come, at most as many of its due deliveries as it may take. Its cost grows
 * with the endpoints that have deliveries waiting, never with their number: an endpoint's backlog of
 * ten thousand hides nothing behind it. On PostgreSQL rows another instance is claiming are skipped
 * (`SKIP LOCKED`); SQLite has one writer at a time. A lease that lapses (its instance died, or hangs)
 * makes the delivery due again, to any instance.
 */

/** Timeouts in a row after which an endpoint is tried one attempt at a time, with `SLOW_TIMEOUT_MS`. */
export const SLOW_AFTER_TIMEOUTS = 3;
/** The longest an attempt to an endpoint that keeps timing out may take. */
export const SLOW_TIMEOUT_MS = 2000;

/** What an attempt needs of its endpoint, read with the claim. */
export type EndpointOfDelivery = Pick<
  WebhookEndpointRow,
  'id' | 'account_id' | 'url' | 'secret_sealed' | 'secret_key_id' | 'failing_since' | 'timeouts_in_a_row'
>;

export interface ClaimedDelivery
  extends Pick<
    WebhookDeliveryRow,
    'id' | 'endpoint_id' | 'change_seq' | 'event_id' | 'event_type' | 'payload' | 'attempts'
  > {
  readonly endpoint: EndpointOfDelivery;
}

/** Whether an endpoint's attempts are made one at a time, with the short timeout. */
export function isSlow(endpoint: Pick<EndpointOfDelivery, 'timeouts_in_a_row'>): boolean {
  return endpoint.timeouts_in_a_row >= SLOW_AFTER_TIMEOUTS;
}

/** Deliveries to lease, shared between the accounts and the endpoints that have some due. */
export interface ClaimRequest {
  readonly now: string;
  readonly leasedUntil: string;
  readonly token: string;
  /** The most deliveries leased (the instance's free slots). */
  readonly limit: number;
  /** The most attempts in flight at once from this instance to one endpoint not in `unbounded`. */
  readonly perEndpoint: number;
  /** The most attempts in flight at once from this instance for one account, while another waits. */
  readonly perAccount: number;
  /** Endpoints that may take any free slot (they answer quickly). */
  readonly unbounded: ReadonlySet<string>;
  /** This instance's attempts in flight, by endpoint. */
  readonly inFlight: ReadonlyMap<string, number>;
  /** This instance's attempts in flight, by account. */
  readonly inFlightByAccount: ReadonlyMap<string, number>;
  /** When this instance last leased a delivery of an account, as a rising count; 0 for never. */
  readonly lastServed: (accountId: string) => number;
}

export interface ClaimOutcome {
  readonly claimed: readonly ClaimedDelivery[];
  /** Whether due deliveries were left for want of a free slot or of a share. */
  readonly left: boolean;
}

interface DueEndpoint extends EndpointOfDelivery {
  /** When its first delivery not leased fell due. */
  readonly first_due: string;
}

type DueRow = Omit<ClaimedDelivery, 'endpoint'>;

/** An endpoint with deliveries due, in a claim: what it may still take, and what was read of it. */
interface EndpointTurn {
  readonly endpoint: DueEndpoint;
  allowance: number;
  /** Its due deliveries read and not yet leased; undefined until its first turn. */
  due: DueRow[] | undefined;
  /** What was read is all it takes in this claim: nothing more of it is due, or it took what it may. */
  done: boolean;
  /** More of it may be due than was read: it was not read yet, or as many were read as asked for. */
  more: boolean;
}

interface AccountTurn {
  readonly id: string;
  readonly endpoints: EndpointTurn[];
  /** The endpoint whose turn is next. */
  next: number;
  inFlight: number;
}

/** Whether an endpoint may still be given a delivery in this claim. */
const mayTake = (turn: EndpointTurn) => turn.allowance > 0 && !turn.done;

export async function claimDue(trx: Db, request: ClaimRequest): Promise<ClaimOutcome> {
  const endpoints = await dueEndpoints(trx, request.now);
  if (endpoints.length === 0) return { claimed: [], left: false };
  const accounts = turnsOf(endpoints, request);
  const claimed: ClaimedDelivery[] = [];
  const open = (account: AccountTurn) => account.endpoints.some(mayTake);
  // Round after round, each open account takes one; a round in which none took, and none was found to
  // have nothing left after all, ends the claim.
  for (let moved = true; moved && claimed.length < request.limit; ) {
    moved = false;
    for (const account of accounts) {
      if (claimed.length >= request.limit) break;
      if (!open(account)) continue;
      // At its half, an account waits while another has deliveries it may be given.
      if (
        account.inFlight >= request.perAccount &&
        accounts.some((other) => other !== account && open(other))
      ) {
        continue;
      }
      const delivery = await takeOne(trx, account, request, request.limit - claimed.length);
      moved = true;
      if (delivery === undefined) continue;
      claimed.push(delivery);
      account.inFlight++;
    }
  }
  if (claimed.length > 0) {
    await trx
      .updateTable('webhook_deliveries')
      .set({ leased_until: request.leasedUntil, lease_token: request.token })
      .where(
        'id',
        'in',
        claimed.map((delivery) => delivery.id),
      )
      .execute();
  }
  const left = accounts.some((account) =>
    account.endpoints.some((turn) => turn.more || (turn.due?.length ?? 0) > 0),
  );
  return { claimed, left };
}

/** The accounts with deliveries due, in the order they are served, each with its endpoints in theirs. */
function turnsOf(endpoints: readonly DueEndpoint[], request: ClaimRequest): AccountTurn[] {
  const byAccount = new Map<string, EndpointTurn[]>();
  for (const endpoint of endpoints) {
    const share = isSlow(endpoint)
      ? 1
      : request.unbounded.has(endpoint.id)
        ? Number.POSITIVE_INFINITY
        : request.perEndpoint;
    const turn: EndpointTurn = {
      endpoint,
      allowance: share - (request.inFlight.get(endpoint.id) ?? 0),
      due: undefined,
      done: false,
      more: true,
    };
    byAccount.set(endpoint.account_id, [...(byAccount.get(endpoint.account_id) ?? []), turn]);
  }
  const oldest = (turns: readonly EndpointTurn[]) => turns[0]?.endpoint.first_due ?? '';
  return [...byAccount]
    .map(([id, turns]) => ({
      id,
      endpoints: turns.sort((a, b) => compare(a.endpoint.first_due, b.endpoint.first_due)),
      next: 0,
      inFlight: request.inFlightByAccount.get(id) ?? 0,
    }))
    .sort(
      (a, b) =>
        request.lastServed(a.id) - request.lastServed(b.id) ||
        compare(oldest(a.endpoints), oldest(b.endpoints)) ||
        compare(a.id, b.id),
    );
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** The next delivery of the account's endpoints in turn, read when an endpoint's first turn comes. */
async function takeOne(
  trx: Db,
  account: AccountTurn,
  request: ClaimRequest,
  room: number,
): Promise<ClaimedDelivery | undefined> {
  const { endpoints } = account;
  for (let step = 0; step < endpoints.length; step++) {
    const index = (account.next + step) % endpoints.length;
    const turn = endpoints[index]!;
    if (!mayTake(turn)) continue;
    if (turn.due === undefined) {
      // Never more than it may take, nor than the slots left: it needs no second read in this claim.
      const wanted = Math.min(turn.allowance, room);
      turn.due = await dueOf(trx, turn.endpoint.id, wanted, request.now);
      turn.more = turn.due.length === wanted;
    }
    const row = turn.due.shift();
    if (turn.due.length === 0) turn.done = true;
    if (row === undefined) continue;
    turn.allowance--;
    account.next = index + 1;
    return { ...row, endpoint: endpointOf(turn.endpoint) };
  }
  return undefined;
}

function endpointOf(row: DueEndpoint): EndpointOfDelivery {
  return {
    id: row.id,
    account_id: row.account_id,
    url: row.url,
    secret_sealed: row.secret_sealed,
    secret_key_id: row.secret_key_id,
    failing_since: row.failing_since,
    timeouts_in_a_row: row.timeouts_in_a_row,
  };
}

/** Up to `count` deliveries of an endpoint due and not leased, the first due first. */
async function dueOf(trx: Db, endpointId: string, count: number, now: string): Promise<DueRow[]> {
  return trx
    .selectFrom(deliveriesBy(trx, 'webhook_deliveries_pending_due'))
    .select([
      'd.id',
      'd.endpoint_id',
      'd.change_seq',
      'd.event_id',
      'd.event_type',
      'd.payload',
      'd.attempts',
    ])
    .where('d.endpoint_id', '=', endpointId)
    .where('d.status', '=', PENDING)
    .where('d.next_attempt_at', '<=', now)
    .where((eb) => eb.or([eb('d.leased_until', 'is', null), eb('d.leased_until', '<=', now)]))
    .orderBy('d.next_attempt_at')
    .limit(count)
    .$if(isPostgres(trx), (qb) => qb.forUpdate('d').skipLocked())
    .execute();
}

/**
 * The enabled endpoints with a delivery due and not leased, with when the first fell due: the
 * endpoints with pending deliveries found by a loose scan of their index (one seek per endpoint, from
 * the last one found), each then asked for its first delivery not leased.
 */
async function dueEndpoints(trx: Db, now: string): Promise<DueEndpoint[]> {
  const pending = deliveriesBy(trx, 'webhook_deliveries_pending_due');
  const { rows } = await sql<DueEndpoint>`with recursive pending_endpoints (endpoint_id) as (
      select (select d.endpoint_id from ${pending} where d.status = ${PENDING}
        order by d.endpoint_id limit 1)
      union all
      select (select d.endpoint_id from ${pending} where d.status = ${PENDING} and d.endpoint_id > p.endpoint_id
        order by d.endpoint_id limit 1)
        from pending_endpoints p where p.endpoint_id is not null
    )
    select * from (
      select e.id, e.account_id, e.url, e.secret_sealed, e.secret_key_id, e.failing_since,
          e.timeouts_in_a_row,
          (select d.next_attempt_at from ${pending}
            where d.endpoint_id = e.id and d.status = ${PENDING}
              and (d.leased_until is null or d.leased_until <= ${now})
            order by d.next_attempt_at limit 1) as first_due
        from pending_endpoints p
        join webhook_endpoints e on e.id = p.endpoint_id and e.status = 'enabled'
    ) due
    where due.first_due <= ${now}`.execute(trx);
  return rows.map((row) => ({ ...row, timeouts_in_a_row: Number(row.timeouts_in_a_row) }));
}
