import { v7 } from 'uuid';
import { type KeyEvent, type KeyManager, mayActFor } from '../auth/api-key-service.js';
import type { AuditEventRow, Db } from '../db/tables.js';
import { type PageRequest, type PageWindow, readPage } from '../paging.js';
import type { AuditEvent, AuditEventPage } from '../schemas/audit.js';

/** Who did something, as the audit trail names them (D23). */
export type AuditActor =
  | { readonly type: 'api-key' | 'user'; readonly id: string }
  | { readonly type: 'operator' }
  | { readonly type: 'leak-report'; readonly id?: string };

/** One event to append. */
export interface NewAuditEvent {
  readonly at: string;
  readonly accountId: string;
  readonly actor: AuditActor;
  readonly action: AuditEvent['action'];
  /** What it was done to: `catalog:org/handbook`, `resource:org/handbook/intro`, `api-key:<id>`. */
  readonly target: string;
  readonly requestId?: string | undefined;
  readonly summary: string;
}

/**
 * The audit trail (D23): events are appended, in the transaction of the write they describe when
 * there is one, and never changed or removed.
 */
export async function appendAuditEvent(db: Db, event: NewAuditEvent): Promise<void> {
  await db
    .insertInto('audit_events')
    .values({
      id: v7(),
      at: event.at,
      account_id: event.accountId,
      actor_type: event.actor.type,
      actor_id: 'id' in event.actor ? (event.actor.id ?? null) : null,
      action: event.action,
      target: event.target,
      request_id: event.requestId ?? null,
      summary: event.summary,
    })
    .execute();
}

export async function countAuditEvents(db: Db, accountId: string): Promise<number> {
  const row = await db
    .selectFrom('audit_events')
    .select((eb) => eb.fn.countAll<number | string>().as('count'))
    .where('account_id', '=', accountId)
    .executeTakeFirstOrThrow();
  return Number(row.count);
}

/** An account's events, newest first. */
export async function listAuditEvents(
  db: Db,
  accountId: string,
  window: PageWindow,
): Promise<AuditEventRow[]> {
  return db
    .selectFrom('audit_events')
    .selectAll()
    .where('account_id', '=', accountId)
    .orderBy('at', 'desc')
    .orderBy('id', 'desc')
    .limit(window.limit)
    .offset(window.offset)
    .execute();
}

export function toAuditEvent(row: AuditEventRow): AuditEvent {
  return {
    id: row.id,
    at: row.at,
    accountId: row.account_id,
    actor: { type: row.actor_type, ...(row.actor_id === null ? {} : { id: row.actor_id }) },
    action: row.action as AuditEvent['action'],
    target: row.target,
    ...(row.request_id === null ? {} : { requestId: row.request_id }),
    summary: row.summary,
  };
}

/** The audit trail as the API reads it: an account's events, for a user who may act for it (D23). */
export class AuditLog {
  constructor(private readonly db: Db) {}

  async listFor(
    user: Pick<KeyManager, 'accounts'>,
    accountId: string,
    request: PageRequest = {},
  ): Promise<AuditEventPage> {
    mayActFor(user, accountId);
    const { rows, meta } = await readPage(
      request,
      () => countAuditEvents(this.db, accountId),
      (window) => listAuditEvents(this.db, accountId, window),
    );
    return { data: rows.map(toAuditEvent), meta };
  }

  /** Appends a key event (D22) once it has committed. */
  async recordKeyEvent(event: KeyEvent): Promise<void> {
    const actor: AuditActor =
      event.actor.type === 'leak-report'
        ? { type: 'leak-report', ...(event.actor.url === undefined ? {} : { id: event.actor.url }) }
        : event.actor;
    const action = (
      {
        created: 'api_key.created',
        rolled: 'api_key.rolled',
        revoked: 'api_key.revoked',
        'leak-revoked': 'api_key.leak_revoked',
      } as const
    )[event.type];
    const summary = {
      created: `API key ${event.keyId} created`,
      rolled: `API key ${event.keyId} rolled; replaced by ${event.replacedBy}`,
      revoked: `API key ${event.keyId} revoked`,
      'leak-revoked': `API key ${event.keyId} revoked: reported leaked`,
    }[event.type];
    await appendAuditEvent(this.db, {
      at: event.at,
      accountId: event.accountId,
      actor,
      action,
      target: `api-key:${event.keyId}`,
      requestId: event.requestId,
      summary,
    });
  }
}
