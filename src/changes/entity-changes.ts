import { sql } from 'kysely';
import type { Db } from '../db/tables.js';

/**
 * The change log read by entity (the sync feed, D27): which Catalogs and Resources of some namespaces
 * changed within a stretch of the log, each once, at its last change there. The stretch is
 * `(from, upto]`: `upto` is a head read before, so that every page of one answer reads the same log.
 * Migration 0011 indexes the log by target and `seq` for these.
 */

/** A Catalog or Resource at its last change within a stretch of the log. */
export interface EntityChange {
  readonly seq: number;
  readonly namespace: string;
  readonly kind: 'catalog' | 'resource';
  readonly id: string;
}

export interface Stretch {
  /** Changes after this `seq`… */
  readonly from: number;
  /** …up to and with this one. */
  readonly upto: number;
}

/**
 * At most `limit` Catalogs and Resources of `namespaces` whose last change in `stretch` comes after
 * `after`, in the order of those last changes.
 */
export async function lastEntityChanges(
  db: Db,
  namespaces: readonly string[],
  stretch: Stretch,
  after: number,
  limit: number,
): Promise<EntityChange[]> {
  const rows = await db
    .selectFrom('changes as c')
    .select(['c.seq', 'c.namespace', 'c.target_kind', 'c.target_id'])
    .where('c.seq', '>', Math.max(after, stretch.from))
    .where('c.seq', '<=', stretch.upto)
    .where('c.namespace', 'in', [...namespaces])
    .where('c.target_kind', 'in', ['catalog', 'resource'])
    .where(({ not, exists, selectFrom }) =>
      not(
        exists(
          selectFrom('changes as later')
            .select(sql`1`.as('one'))
            .whereRef('later.target_id', '=', 'c.target_id')
            .whereRef('later.seq', '>', 'c.seq')
            .where('later.seq', '<=', stretch.upto),
        ),
      ),
    )
    .orderBy('c.seq')
    .limit(limit)
    .execute();
  return rows.map((row) => ({
    seq: Number(row.seq),
    namespace: row.namespace,
    kind: row.target_kind as 'catalog' | 'resource',
    id: row.target_id,
  }));
}

/**
 * Which of `catalogIds` had their status changed in `stretch`, as far as the log can tell: a
 * `catalog.updated` (fields of its own, a status among them) or a `catalog.archived` (from draft, too).
 */
export async function catalogsRestatedIn(
  db: Db,
  catalogIds: readonly string[],
  stretch: Stretch,
): Promise<Set<string>> {
  if (catalogIds.length === 0) return new Set();
  const rows = await db
    .selectFrom('changes')
    .select('target_id')
    .distinct()
    .where('target_id', 'in', [...catalogIds])
    .where('type', 'in', ['catalog.updated', 'catalog.archived'])
    .where('seq', '>', stretch.from)
    .where('seq', '<=', stretch.upto)
    .execute();
  return new Set(rows.map((row) => row.target_id));
}

/** When the first change after `seq` was made; none when nothing was appended after it. */
export async function firstChangeAfter(
  db: Db,
  seq: number,
): Promise<{ seq: number; at: string } | undefined> {
  const row = await db
    .selectFrom('changes')
    .select(['seq', 'at'])
    .where('seq', '>', seq)
    .orderBy('seq')
    .limit(1)
    .executeTakeFirst();
  return row && { seq: Number(row.seq), at: row.at };
}
