import { type KeyManager, mayActFor } from '../auth/api-key-service.js';
import { type Change, toChange } from '../changes/change-log.js';
import type { ChangeRow, Db } from '../db/tables.js';
import { InputError } from '../foundation/errors.js';
import { type PageRequest, readPage } from '../foundation/paging.js';
import type { AuditEvent, AuditEventPage, AuditFilter } from '../schemas/audit.js';

/** How an event names its target: `catalog:org/handbook`, `resource:org/handbook/intro`, `api-key:<id>`. */
function targetText(change: Change): string {
  const kind = change.target.kind === 'api_key' ? 'api-key' : change.target.kind;
  return `${kind}:${change.target.humanRef ?? change.target.id}`;
}

/** A change of the log as the audit list shows it. */
export function toAuditEvent(change: Change): AuditEvent {
  return {
    id: change.id,
    at: change.at,
    accountId: change.namespace,
    actor: change.actor,
    action: change.type,
    target: targetText(change),
    ...(change.requestId === undefined ? {} : { requestId: change.requestId }),
    summary: change.summary,
  };
}

/** An event with its place in the change log: what a reader that goes on from it passes back. */
export interface LoggedEvent {
  readonly seq: number;
  readonly event: AuditEvent;
}

/**
 * The audit list (D23): an account's changes, read from the change log, where every write appends
 * them in its own transaction. Nothing here writes: the log is only ever appended to, by the unit of
 * work.
 */
export class AuditLog {
  constructor(private readonly db: Db) {}

  /** An account's events, newest first, for a user who may act for it; only those `filter` lets through (D33). */
  async listFor(
    user: Pick<KeyManager, 'accounts'>,
    accountId: string,
    request: PageRequest & AuditFilter = {},
  ): Promise<AuditEventPage> {
    mayActFor(user, accountId);
    const filtered = this.filtered(accountId, request);
    const { rows, meta } = await readPage(
      request,
      async () => {
        const row = await filtered
          .select((eb) => eb.fn.countAll<number | string>().as('count'))
          .executeTakeFirstOrThrow();
        return Number(row.count);
      },
      (window) =>
        filtered.selectAll().orderBy('seq', 'desc').limit(window.limit).offset(window.offset).execute(),
    );
    return { data: rows.map((row) => toAuditEvent(toChange(row))), meta };
  }

  /**
   * The account's changes that `filter` lets through. Times are compared as the log writes them
   * (`toISOString`, one length, so text order is time order): each bound is written that way first.
   */
  private filtered(accountId: string, filter: AuditFilter) {
    const from = filter.from === undefined ? undefined : new Date(filter.from).toISOString();
    const to = filter.to === undefined ? undefined : new Date(filter.to).toISOString();
    if (from !== undefined && to !== undefined && to <= from) {
      throw InputError.of('query', 'to', 'must be later than from');
    }
    let query = this.db.selectFrom('changes').where('namespace', '=', accountId);
    if (filter.action !== undefined && filter.action.length > 0)
      query = query.where('type', 'in', filter.action);
    if (filter.actor !== undefined) query = query.where('actor_id', '=', filter.actor);
    if (from !== undefined) query = query.where('at', '>=', from);
    if (to !== undefined) query = query.where('at', '<', to);
    return query;
  }

  /**
   * Up to `limit` of an account's events, newest first, older than `beforeSeq` (from the newest when
   * not given): an operator's read (`playbook audit`), a page at a time through the account's index.
   */
  async newestBefore(
    accountId: string,
    beforeSeq: number | undefined,
    limit: number,
  ): Promise<LoggedEvent[]> {
    let query = this.db.selectFrom('changes').selectAll().where('namespace', '=', accountId);
    if (beforeSeq !== undefined) query = query.where('seq', '<', beforeSeq);
    const rows = await query.orderBy('seq', 'desc').limit(limit).execute();
    return rows.map(loggedEvent);
  }

  /**
   * Up to `limit` of an account's events after `afterSeq`, oldest first (`playbook audit --follow`).
   * Nothing is missed by reading on from the last one seen: no change commits behind one a reader has
   * seen (D26).
   */
  async oldestAfter(accountId: string, afterSeq: number, limit: number): Promise<LoggedEvent[]> {
    const rows = await this.db
      .selectFrom('changes')
      .selectAll()
      .where('namespace', '=', accountId)
      .where('seq', '>', afterSeq)
      .orderBy('seq')
      .limit(limit)
      .execute();
    return rows.map(loggedEvent);
  }
}

function loggedEvent(row: ChangeRow): LoggedEvent {
  const change = toChange(row);
  return { seq: change.seq, event: toAuditEvent(change) };
}
