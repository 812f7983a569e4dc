import { v7 } from 'uuid';
import { chunk, rowsPerInsert } from '../db/batches.js';
import type { ChangeRow, Db } from '../db/tables.js';
import { CHANGE_TYPES } from '../schemas/audit.js';
import { SERVICE_OWNER } from '../schemas/identity.js';

export { CHANGE_TYPES };

/**
 * The change log (docs/design.md, "The change log"): every write appends what it changed, in its own
 * transaction, so that a write that rolls back leaves no change and no change exists for a write that
 * did not commit. Everything that must know what changed reads it: the audit list, the answers kept
 * in memory on every instance, and what follows.
 */

export type ChangeType = (typeof CHANGE_TYPES)[number];

export type TargetKind = 'catalog' | 'resource' | 'api_key' | 'account' | 'webhook_endpoint';

/** The namespace of service-owned Catalogs; every other namespace is an account id (never `svc`). */
export const SERVICE_NAMESPACE = SERVICE_OWNER;

/** Who made a change. */
export type ChangeActor =
  | { readonly type: 'api-key' | 'user'; readonly id: string }
  | { readonly type: 'operator' }
  | { readonly type: 'leak-report'; readonly id?: string }
  /** The service itself: a webhook endpoint disabled after failing for days (D28). */
  | { readonly type: 'service' };

/** A change as a write states it; the unit of work adds when, who and the request. */
export interface NewChange {
  readonly namespace: string;
  readonly type: ChangeType;
  readonly target: { readonly kind: TargetKind; readonly id: string; readonly humanRef?: string };
  /** What changed, in one line. */
  readonly summary: string;
}

/** Who writes and why: stamped on every change of one write. */
export interface ChangeContext {
  readonly at: string;
  readonly actor: ChangeActor;
  readonly requestId?: string | undefined;
}

/** A change as the log holds it. */
export interface Change extends NewChange {
  readonly seq: number;
  readonly id: string;
  readonly at: string;
  readonly actor: ChangeActor;
  readonly requestId?: string;
}

/** Changes of one write's append written per statement (12 values each). */
const ROWS_PER_INSERT = Math.min(500, rowsPerInsert(12));

/**
 * Appends `changes` through `trx`, the write's transaction, and returns the `seq` of the last.
 *
 * The transaction holds the head row from its first statement (the unit of work claims it), so
 * writers append one at a time, each after the previous one's commit: numbers are handed out in commit
 * order, and once a reader has seen `seq` N no smaller number commits later.
 */
export async function appendChanges(
  trx: Db,
  context: ChangeContext,
  changes: readonly NewChange[],
): Promise<number> {
  const head = await trx
    .updateTable('data_generation')
    .set((eb) => ({ generation: eb('generation', '+', changes.length) }))
    .where('id', '=', 1)
    .returning('generation')
    .executeTakeFirstOrThrow();
  const last = Number(head.generation);
  let seq = last - changes.length;
  const actorId = 'id' in context.actor ? (context.actor.id ?? null) : null;
  for (const slice of chunk(changes, ROWS_PER_INSERT)) {
    await trx
      .insertInto('changes')
      .values(
        slice.map((change) => ({
          seq: ++seq,
          id: v7(),
          at: context.at,
          namespace: change.namespace,
          type: change.type,
          target_kind: change.target.kind,
          target_id: change.target.id,
          target_ref: change.target.humanRef ?? null,
          actor_type: context.actor.type,
          actor_id: actorId,
          request_id: context.requestId ?? null,
          summary: change.summary,
        })),
      )
      .execute();
  }
  return last;
}

/** The `seq` of the last change committed, as `db` sees it (0 before the first). */
export async function readHead(db: Db): Promise<number> {
  const row = await db
    .selectFrom('data_generation')
    .select('generation')
    .where('id', '=', 1)
    .executeTakeFirstOrThrow();
  return Number(row.generation);
}

/**
 * The `seq` of the last change of `namespace` (0 before its first): what a write planned outside its
 * transaction compares to learn whether anything it planned against has changed since.
 */
export async function readNamespaceSeq(db: Db, namespace: string): Promise<number> {
  const row = await db
    .selectFrom('changes')
    .select((eb) => eb.fn.max('seq').as('seq'))
    .where('namespace', '=', namespace)
    .executeTakeFirst();
  return Number(row?.seq ?? 0);
}

/**
 * The `seq` of the last change to a Catalog or a Resource of `namespace` (0 before its first): what a
 * Catalog's tag names of its Resources (object-tags.ts). The namespace's changes are walked from the
 * newest along their index, so a few changes of keys or endpoints since are stepped over, and no more.
 */
export async function readCatalogChangeSeq(db: Db, namespace: string): Promise<number> {
  const row = await db
    .selectFrom('changes')
    .select('seq')
    .where('namespace', '=', namespace)
    .where('target_kind', 'in', ['catalog', 'resource'])
    .orderBy('namespace', 'desc')
    .orderBy('seq', 'desc')
    .limit(1)
    .executeTakeFirst();
  return Number(row?.seq ?? 0);
}

/** At most `limit` changes after `after`, in order. */
export async function readChangesAfter(db: Db, after: number, limit: number): Promise<Change[]> {
  const rows = await db
    .selectFrom('changes')
    .selectAll()
    .where('seq', '>', after)
    .orderBy('seq')
    .limit(limit)
    .execute();
  return rows.map(toChange);
}

export function toChange(row: ChangeRow): Change {
  const actor: ChangeActor =
    row.actor_type === 'operator' || row.actor_type === 'service'
      ? { type: row.actor_type }
      : row.actor_type === 'leak-report'
        ? { type: 'leak-report', ...(row.actor_id === null ? {} : { id: row.actor_id }) }
        : { type: row.actor_type, id: row.actor_id ?? '' };
  return {
    seq: Number(row.seq),
    id: row.id,
    at: row.at,
    namespace: row.namespace,
    type: row.type as ChangeType,
    target: {
      kind: row.target_kind as TargetKind,
      id: row.target_id,
      ...(row.target_ref === null ? {} : { humanRef: row.target_ref }),
    },
    actor,
    ...(row.request_id === null ? {} : { requestId: row.request_id }),
    summary: row.summary,
  };
}
