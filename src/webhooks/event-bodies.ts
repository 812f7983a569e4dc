import { type Change, SERVICE_NAMESPACE, toChange } from '../changes/change-log.js';
import type { Db } from '../db/tables.js';
import type { WebhookEvent } from '../schemas/webhooks.js';
import type { ClaimedDelivery } from './claim.js';

/**
 * What each delivery sends (D28): a change's event is made from the change when sent, so that every
 * attempt sends the same bytes; a test event's body was kept with its delivery.
 */

/** The body of an event about `change`: for the account's own changes, all the log says of it. */
export function eventOf(change: Change): WebhookEvent {
  const own = change.namespace !== SERVICE_NAMESPACE;
  return {
    type: change.type,
    timestamp: change.at,
    data: {
      id: change.id,
      seq: change.seq,
      ...(own ? { accountId: change.namespace } : {}),
      owner: own ? 'account' : 'svc',
      target: change.target,
      // How the service's own content changed, and who changed it, is read from the content itself.
      ...(own
        ? {
            summary: change.summary,
            actor: change.actor,
            ...(change.requestId === undefined ? {} : { requestId: change.requestId }),
          }
        : {}),
    },
  };
}

/** What the bodies of a turn's deliveries are made from, read at once for all of them. */
export interface EventSource {
  readonly changes: ReadonlyMap<number, Change>;
  /** The service's Catalogs and Resources no account may see now (D5: its drafts). */
  readonly hidden: ReadonlySet<string>;
}

/** Reads the changes `claimed` tell of, and which of the service's targets are hidden now. */
export async function eventsOf(db: Db, claimed: readonly ClaimedDelivery[]): Promise<EventSource> {
  const seqs = claimed.flatMap((delivery) =>
    delivery.change_seq === null ? [] : [Number(delivery.change_seq)],
  );
  if (seqs.length === 0) return { changes: new Map(), hidden: new Set() };
  const rows = await db.selectFrom('changes').selectAll().where('seq', 'in', seqs).execute();
  const changes = new Map(rows.map((row) => [Number(row.seq), toChange(row)]));
  return { changes, hidden: await hiddenTargets(db, changes) };
}

/** The body a delivery sends; undefined when it is not to be sent (its change is gone, or hidden). */
export function bodyOf(delivery: ClaimedDelivery, source: EventSource): string | undefined {
  if (delivery.change_seq === null) return delivery.payload ?? '{}';
  const change = source.changes.get(Number(delivery.change_seq));
  if (!change || (change.namespace === SERVICE_NAMESPACE && source.hidden.has(change.target.id))) {
    return undefined;
  }
  return JSON.stringify(eventOf(change));
}

/**
 * The service's Catalogs and Resources among the targets that no account may see now (D5: the
 * service's drafts): their changes are not told to anyone.
 */
async function hiddenTargets(db: Db, changes: ReadonlyMap<number, Change>): Promise<Set<string>> {
  const service = [...changes.values()].filter((change) => change.namespace === SERVICE_NAMESPACE);
  const catalogIds = service.filter((c) => c.target.kind === 'catalog').map((c) => c.target.id);
  const resourceIds = service.filter((c) => c.target.kind === 'resource').map((c) => c.target.id);
  const visible = new Set<string>();
  if (catalogIds.length > 0) {
    const rows = await db
      .selectFrom('catalogs')
      .select('id')
      .where('id', 'in', catalogIds)
      .where('status', '<>', 'draft')
      .execute();
    for (const row of rows) visible.add(row.id);
  }
  if (resourceIds.length > 0) {
    const rows = await db
      .selectFrom('resources as r')
      .innerJoin('catalogs as c', 'c.id', 'r.catalog_id')
      .select('r.id')
      .where('r.id', 'in', resourceIds)
      .where('r.status', '<>', 'draft')
      .where('c.status', '<>', 'draft')
      .execute();
    for (const row of rows) visible.add(row.id);
  }
  return new Set([...catalogIds, ...resourceIds].filter((id) => !visible.has(id)));
}
