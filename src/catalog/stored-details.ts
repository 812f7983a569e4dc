import { Type } from '@sinclair/typebox';
import fastJson from 'fast-json-stringify';
import type { FastifyBaseLogger } from 'fastify';
import type { ChangeFollower, FollowedChanges } from '../changes/change-follower.js';
import { readHead } from '../changes/change-log.js';
import type { UnitOfWork } from '../changes/unit-of-work.js';
import { chunk, MAX_IN_LIST } from '../db/batches.js';
import { PreparedQuery } from '../db/prepared-query.js';
import type { Db, StoredDetailTable } from '../db/tables.js';
import { nextTurn } from '../foundation/pace.js';
import { playbookSchemas, ResourceDetail } from '../schemas/playbook.js';

/**
 * The read model of Resources' details (D30, migration 0013): each visible Resource's detail answer,
 * its text and version tag, stored with whose it is and its facets, so that a read not answered from
 * memory is one search by the Resource's id (on a million Resources, five searches and the objects
 * made of them cost three times the rest of a request).
 *
 * Every write deletes the rows of what it changes, in its own transaction (changes/forget-details.ts).
 * `StoredDetailsBuilder` writes them again from the rows, as the service follows the change log, and
 * writes those the table lacks when it starts. A row is written only when no change to its Resource or
 * its Catalog was appended since the head read before the Resource was (see `STORE_WHEN_CURRENT`), so
 * a stored detail is never older than the rows it was made from; a Resource without a row is read the
 * way it always is.
 */

/**
 * The form of the stored answers: what the service writes now. A row of another form (written by an
 * earlier release, whose answers were shaped otherwise) is not sent; the read that meets it has it
 * written again.
 */
export const STORED_DETAIL_FORM = '1';

/** What a read takes from a stored detail. */
export type StoredDetail = Pick<StoredDetailTable, 'account_id' | 'facets' | 'form' | 'tag' | 'body'>;

const STORED_DETAIL = new PreparedQuery(['resourceId'], (db, slot, _shape: 'any') =>
  db
    .selectFrom('stored_details')
    .select(['account_id', 'facets', 'form', 'tag', 'body'])
    .where('resource_id', '=', slot.resourceId),
);

/** The stored detail of the Resource `resourceId`, of any form; none when the table has no row. */
export async function findStoredDetail(db: Db, resourceId: string): Promise<StoredDetail | undefined> {
  const [row] = await STORED_DETAIL.run(db, 'any', { resourceId });
  return row;
}

/**
 * A Resource's detail as its owner's callers see it, whatever their plan: what the read model stores
 * (stored-details.ts), with what a read decides from the stored row alone.
 */
export interface OwnerDetail {
  readonly detail: ResourceDetail;
  readonly tag: string;
  /** The Catalog's account; null for the service's. */
  readonly accountId: string | null;
  /** The Resource's facets as stored: the plan gate's (D6). */
  readonly facets: string | null;
}

/** Resources read and written per round of the builder. */
const ROUND = 200;
/** Ids of Resources listed per statement by a pass. */
const IDS_PER_READ = 1000;

/** A stored detail as the builder writes it. */
type NewStoredDetail = StoredDetailTable;

/** The serializer of a Resource's detail: the one the route's 200 response schema compiles to. */
export type SerializeDetail = (detail: ResourceDetail) => string;

/**
 * The serializer of a Resource's detail as Fastify compiles the route's (its compiler, the route's 200
 * schema and the shared schemas it refers to): the read model stores the bytes a read sends.
 */
export function compileDetailSerializer(): SerializeDetail {
  const schemas = Object.fromEntries(playbookSchemas.map((schema) => [schema.$id, schema]));
  return fastJson(Type.Ref(ResourceDetail), { schema: schemas }) as SerializeDetail;
}

export interface StoredDetailsBuilderOptions {
  readonly logger?: FastifyBaseLogger;
  /** Resources read and written per round (a test makes it small). */
  readonly round?: number;
}

/**
 * Writes the stored details: at start, of every Resource the table has no row for; then, as the
 * change log is followed, of the Resources whose rows the writes deleted. One round at a time, a
 * Resource after another, each yielding to requests, so that the work never holds a request up.
 */
export class StoredDetailsBuilder {
  /** Resources whose rows are to be written. */
  private readonly due = new Set<string>();
  /** Catalogs whose Resources' rows are to be written (a change of the Catalog deleted them). */
  private readonly dueCatalogs = new Set<string>();
  /** Whether a pass over every Resource is due (at start, and when the log could not be followed). */
  private passDue = false;
  private running: Promise<void> | undefined;
  private stopped = false;
  private unfollow: (() => void) | undefined;
  private readonly round: number;

  constructor(
    private readonly reader: Db,
    private readonly writes: UnitOfWork,
    private readonly read: (resourceId: string) => Promise<OwnerDetail | undefined>,
    private readonly serialize: SerializeDetail,
    private readonly options: StoredDetailsBuilderOptions = {},
  ) {
    this.round = options.round ?? ROUND;
  }

  /** Writes the rows the table lacks, then follows `follower`'s changes. */
  start(follower: ChangeFollower): void {
    this.unfollow = follower.onChange((followed) => this.follow(followed));
    this.passDue = true;
    this.kick();
  }

  /** Stops after the Resource being written; `settled` resolves once it is. */
  stop(): void {
    this.stopped = true;
    this.unfollow?.();
  }

  /** Resolves once everything due so far is written (or given up on). */
  async settled(): Promise<void> {
    while (this.running) await this.running;
  }

  /** Asks for the row of one Resource (a read met none of the current form). */
  request(resourceId: string): void {
    this.due.add(resourceId);
    this.kick();
  }

  /** Writes every row the table lacks, to the end: what `playbook details build` runs. */
  async buildAll(): Promise<number> {
    this.passDue = true;
    return this.work();
  }

  private follow({ changes, startAfresh }: FollowedChanges): void {
    if (startAfresh) this.passDue = true;
    for (const { type, target } of changes) {
      if (target.kind === 'resource') this.due.add(target.id);
      else if (target.kind === 'catalog' && type !== 'catalog.created') this.dueCatalogs.add(target.id);
    }
    this.kick();
  }

  private kick(): void {
    if (this.running || this.stopped) return;
    if (!this.passDue && this.due.size === 0 && this.dueCatalogs.size === 0) return;
    this.running = this.work()
      .then(() => undefined)
      .catch((error: unknown) => {
        // The rows stay missing, and their Resources are read the way they always are; the next
        // change or start tries again.
        this.options.logger?.warn({ err: error }, 'stored details could not be written');
      })
      .finally(() => {
        this.running = undefined;
        this.kick();
      });
  }

  /** Writes what is due, round by round; returns how many rows it wrote. */
  private async work(): Promise<number> {
    let written = 0;
    while (!this.stopped) {
      if (this.due.size > 0) {
        const ids = [...this.due].slice(0, this.round);
        for (const id of ids) this.due.delete(id);
        written += await this.write(ids);
      } else if (this.dueCatalogs.size > 0) {
        const [catalogId] = this.dueCatalogs;
        this.dueCatalogs.delete(catalogId!);
        written += await this.pass(catalogId);
      } else if (this.passDue) {
        this.passDue = false;
        const passed = await this.pass(undefined);
        written += passed;
        this.options.logger?.info({ written: passed }, 'stored details written for every Resource');
      } else {
        break;
      }
    }
    return written;
  }

  /**
   * Writes the rows of every Resource of one Catalog (whose change deleted them, or, written by a
   * process of an earlier release, did not), or, without one, the rows the table lacks.
   */
  private async pass(catalogId: string | undefined): Promise<number> {
    let written = 0;
    let after = '';
    while (!this.stopped) {
      let query = this.reader
        .selectFrom('resources')
        .select('resources.id')
        .where('resources.id', '>', after)
        .orderBy('resources.id')
        .limit(IDS_PER_READ);
      query =
        catalogId === undefined
          ? query.where(({ not, exists, selectFrom }) =>
              not(
                exists(
                  selectFrom('stored_details')
                    .select('stored_details.resource_id')
                    .whereRef('stored_details.resource_id', '=', 'resources.id'),
                ),
              ),
            )
          : query.where('resources.catalog_id', '=', catalogId);
      const ids = (await query.execute()).map((row) => row.id);
      if (ids.length === 0) break;
      after = ids.at(-1)!;
      for (let from = 0; from < ids.length && !this.stopped; from += this.round) {
        written += await this.write(ids.slice(from, from + this.round));
      }
    }
    return written;
  }

  /**
   * Reads the details of `ids` and writes their rows, each only if nothing it shows changed since the
   * head read first. A Resource whose row could not be written so is due again; one not visible to its
   * owner (a service draft) or gone has none.
   */
  private async write(ids: readonly string[]): Promise<number> {
    const seen = await readHead(this.reader);
    const rows: NewStoredDetail[] = [];
    const unseen: string[] = [];
    for (const id of ids) {
      if (this.stopped) break;
      const read = await this.read(id);
      if (!read) unseen.push(id);
      else {
        rows.push({
          resource_id: id,
          catalog_id: read.detail.catalogId,
          account_id: read.accountId,
          facets: read.facets,
          form: STORED_DETAIL_FORM,
          tag: read.tag,
          body: this.serialize(read.detail),
        });
      }
      await nextTurn();
    }
    if (rows.length === 0 && unseen.length === 0) return 0;
    const stale = await this.writes.run('store-details', { actor: { type: 'service' } }, async (write) => {
      // A row of a Resource its owner no longer sees goes, whenever that changed: deleting is never stale.
      for (const slice of chunk(unseen, MAX_IN_LIST)) {
        await write.db.deleteFrom('stored_details').where('resource_id', 'in', slice).execute();
      }
      return storeWhenCurrent(write.db, rows, seen);
    });
    for (const id of stale) this.due.add(id);
    return rows.length - stale.length;
  }
}

/**
 * Stores `rows`, read after the log's head was `seen`, in the writers' turn (the unit of work holds it):
 * each unless a change to its Resource or its Catalog was appended since. When the head moved without
 * changes (a process of an earlier release wrote), nothing is stored: what it changed is unknown.
 * Returns the ids of the Resources that changed since.
 */
async function storeWhenCurrent(trx: Db, rows: readonly NewStoredDetail[], seen: number): Promise<string[]> {
  const head = await readHead(trx);
  const { count } = await trx
    .selectFrom('changes')
    .select((eb) => eb.fn.countAll<number | string>().as('count'))
    .where('seq', '>', seen)
    .executeTakeFirstOrThrow();
  // The follower meets the same gap and starts afresh, which has every missing row written again.
  if (Number(count) !== head - seen) return [];
  const stale: string[] = [];
  for (const row of rows) {
    const changed = await trx
      .selectFrom('changes')
      .select('seq')
      .where('target_id', 'in', [row.resource_id, row.catalog_id])
      .where('seq', '>', seen)
      .limit(1)
      .executeTakeFirst();
    if (changed) {
      stale.push(row.resource_id);
      continue;
    }
    await trx
      .insertInto('stored_details')
      .values(row)
      .onConflict((oc) =>
        oc
          .column('resource_id')
          .doUpdateSet((eb) => ({
            catalog_id: eb.ref('excluded.catalog_id'),
            account_id: eb.ref('excluded.account_id'),
            facets: eb.ref('excluded.facets'),
            form: eb.ref('excluded.form'),
            tag: eb.ref('excluded.tag'),
            body: eb.ref('excluded.body'),
          }))
          // The row another instance wrote for the same change is left as it is: no page is written.
          .where((eb) =>
            eb.or([
              eb('stored_details.tag', '<>', eb.ref('excluded.tag')),
              eb('stored_details.form', '<>', eb.ref('excluded.form')),
              eb('stored_details.body', '<>', eb.ref('excluded.body')),
            ]),
          ),
      )
      .execute();
  }
  return stale;
}
