import type { FastifyBaseLogger } from 'fastify';
import { type Insertable, sql } from 'kysely';
import { chunk, MAX_IN_LIST } from '../db/batches.js';
import type { Db, WebhookDeliveryRow, WebhookDeliveryTable } from '../db/tables.js';
import { growingCache } from '../foundation/growing-cache.js';
import type { Metrics } from '../observability/metrics.js';
import { deliveriesBy, isPostgres, newUuid, PENDING } from './delivery-rows.js';

/**
 * The bound on what waits for one endpoint (D28): nothing is lost below `max` pending deliveries;
 * past it the oldest are failed, unsent, with the reason `backlog_exceeded` (an attempt listed as
 * such), and can be sent again like any failed delivery. An endpoint that never answers thus has at
 * most `max` deliveries waiting for it, whatever is written meanwhile.
 *
 * Each endpoint's row counts its pending deliveries (`pending_deliveries`), kept in the transaction of
 * every change of one: a write adds what it made due just before it commits (outbox.ts), a test or a
 * retry adds to it (here), an attempt that finishes a delivery or a delivery dropped takes from it (the
 * dispatcher's turn). The bound is then checked without counting rows, and failing the oldest reads
 * them by the index of an endpoint's pending deliveries by age, as many as are over.
 *
 * On PostgreSQL the endpoints' rows are locked in the order of their ids, as the dispatcher's turn
 * locks them, so that a write and a turn wait for one another rather than deadlock; the deliveries to
 * fail are neither rows another transaction holds (`SKIP LOCKED`) nor deliveries leased for an
 * attempt.
 */
export interface PendingBoundOptions {
  /** Deliveries pending to one endpoint at most. */
  readonly max: number;
  /** Told of deliveries failed past the bound, inside the transaction that fails them. */
  readonly onExceeded?: (endpointId: string, failed: number) => void;
  readonly now?: () => number;
}

/** How often one endpoint's deliveries failed past the bound are said in the log, at most. */
const REPORT_EVERY_MS = 60_000;

/**
 * Says deliveries failed past the bound: each counted as a failed delivery, and a warning per
 * endpoint at most once a minute (an endpoint that stays past its bound fails one for each change).
 * Told inside the write's transaction: a write that is tried again may count its failures twice.
 */
export function reportExceeded(
  logger: FastifyBaseLogger,
  metrics: Metrics,
  now: () => number = Date.now,
): (endpointId: string, failed: number) => void {
  const said = growingCache<string, number>(10_000);
  return (endpointId, failed) => {
    metrics.webhookDeliveries.inc({ outcome: 'failed' }, failed);
    const at = now();
    if (at - (said.get(endpointId) ?? Number.NEGATIVE_INFINITY) < REPORT_EVERY_MS) return;
    said.set(endpointId, at);
    logger.warn(
      { webhookEndpoint: endpointId, failed },
      'webhook deliveries failed unsent: the endpoint has more pending than PLAYBOOK_WEBHOOK_MAX_PENDING_PER_ENDPOINT',
    );
  };
}

/** What the attempt listed for a delivery given up past the bound says. */
function exceededError(max: number): string {
  return `not sent: more than ${max} deliveries were pending to this endpoint, and this was among the oldest; retry it to send it`;
}

export class PendingBound {
  readonly max: number;
  private readonly now: () => number;

  constructor(private readonly options: PendingBoundOptions) {
    this.max = options.max;
    this.now = options.now ?? Date.now;
  }

  /**
   * Adds `added` (by endpoint) to the endpoints' pending counts, in the caller's transaction, and fails
   * the oldest of an endpoint past the bound, never `keep` (a delivery just asked for again).
   */
  async add(trx: Db, added: ReadonlyMap<string, number>, keep?: string): Promise<void> {
    const at = new Date(this.now()).toISOString();
    for (const ids of chunk([...added.keys()].sort(), MAX_IN_LIST)) {
      if (isPostgres(trx)) {
        await trx
          .selectFrom('webhook_endpoints')
          .select('id')
          .where('id', 'in', ids)
          .orderBy('id')
          .forUpdate()
          .execute();
      }
      const counts = sql.join(
        ids.map((id) => sql`when ${id} then cast(${added.get(id) ?? 0} as integer)`),
        sql` `,
      );
      const { rows } = await sql<{ id: string; pending_deliveries: number }>`update webhook_endpoints
        set pending_deliveries = pending_deliveries + case id ${counts} end
        where id in (${sql.join(ids)})
        returning id, pending_deliveries`.execute(trx);
      for (const row of rows.sort((a, b) => (a.id < b.id ? -1 : 1))) {
        const over = Number(row.pending_deliveries) - this.max;
        if (over > 0) await this.failOldest(trx, row.id, over, at, keep);
      }
    }
  }

  /**
   * Inserts a delivery due now that no change made (a test event), counted and bounded, in a
   * transaction of its own.
   */
  async insert(db: Db, row: Insertable<WebhookDeliveryTable>): Promise<void> {
    await db.transaction().execute(async (trx) => {
      await trx.insertInto('webhook_deliveries').values(row).execute();
      await this.add(trx, new Map([[row.endpoint_id, 1]]), row.id);
    });
  }

  /**
   * Makes a delivery of `endpointId` due at `at` whatever became of it: a finished one pending again
   * (counted, and bounded without it), a pending one due now. Undefined when there is no such delivery.
   */
  async makeDue(
    db: Db,
    endpointId: string,
    deliveryId: string,
    at: string,
  ): Promise<WebhookDeliveryRow | undefined> {
    return db.transaction().execute(async (trx) => {
      const of = trx
        .updateTable('webhook_deliveries')
        .where('id', '=', deliveryId)
        .where('endpoint_id', '=', endpointId);
      const reopened = await of
        .set({ status: 'pending', next_attempt_at: at, updated_at: at })
        .where('status', '<>', 'pending')
        .returningAll()
        .executeTakeFirst();
      if (reopened) {
        await this.add(trx, new Map([[endpointId, 1]]), deliveryId);
        return reopened;
      }
      return of.set({ next_attempt_at: at, updated_at: at }).returningAll().executeTakeFirst();
    });
  }

  /**
   * Fails the `count` oldest pending deliveries of an endpoint that no attempt holds, each with an
   * attempt listed (`backlog_exceeded`), and takes them from its count.
   */
  private async failOldest(trx: Db, endpointId: string, count: number, at: string, keep?: string) {
    const oldest = await trx
      .selectFrom(deliveriesBy(trx, 'webhook_deliveries_pending_age'))
      .select('d.id')
      .where('d.endpoint_id', '=', endpointId)
      .where('d.status', '=', PENDING)
      .where((eb) => eb.or([eb('d.leased_until', 'is', null), eb('d.leased_until', '<=', at)]))
      .$if(keep !== undefined, (qb) => qb.where('d.id', '<>', keep ?? ''))
      .orderBy('d.created_at')
      .orderBy('d.id')
      .limit(count)
      .$if(isPostgres(trx), (qb) => qb.forUpdate('d').skipLocked())
      .execute();
    if (oldest.length === 0) return;
    const error = exceededError(this.max);
    for (const slice of chunk(
      oldest.map((row) => row.id),
      MAX_IN_LIST,
    )) {
      await sql`insert into webhook_attempts
          (id, delivery_id, endpoint_id, attempt, at, outcome, duration_ms, error, reason)
        select ${newUuid(trx)}, d.id, d.endpoint_id, d.attempts + 1, ${at}, 'failed', 0, ${error}, 'backlog_exceeded'
          from webhook_deliveries d where d.id in (${sql.join(slice)})`.execute(trx);
      await trx
        .updateTable('webhook_deliveries')
        .set((eb) => ({
          status: 'failed',
          attempts: eb('attempts', '+', 1),
          next_attempt_at: at,
          leased_until: null,
          lease_token: null,
          updated_at: at,
        }))
        .where('id', 'in', slice)
        .execute();
    }
    await trx
      .updateTable('webhook_endpoints')
      .set((eb) => ({ pending_deliveries: eb('pending_deliveries', '-', oldest.length) }))
      .where('id', '=', endpointId)
      .execute();
    this.options.onExceeded?.(endpointId, oldest.length);
  }
}
