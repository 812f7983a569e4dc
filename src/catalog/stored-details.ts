import { Type } from '@sinclair/typebox';
import fastJson from 'fast-json-stringify';
import type { FastifyBaseLogger } from 'fastify';
import type { CompiledQuery } from 'kysely';
import type { ChangeFollower } from '../changes/change-follower.js';
import { readHead } from '../changes/change-log.js';
import { CATALOG_CHANGES_SHOWN } from '../changes/forget-details.js';
import type { UnitOfWork } from '../changes/unit-of-work.js';
import { chunk, MAX_IN_LIST } from '../db/batches.js';
import type { ReadNow } from '../db/create-db.js';
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
 * its Catalog was appended since the head read before the Resource was (see `storeWhenCurrent`), so
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

/** The search `findStoredDetailNow` makes, compiled once for each database. */
const compiledSearches = new WeakMap<Db, CompiledQuery<StoredDetail>>();

/**
 * `findStoredDetail` made at once, without a promise, where the database can (`readNow`, SQLite's
 * reader on the event loop's thread): a read not held in memory then costs the search alone.
 */
export function findStoredDetailNow(db: Db, readNow: ReadNow, resourceId: string): StoredDetail | undefined {
  let compiled = compiledSearches.get(db);
  if (!compiled) {
    compiled = db
      .selectFrom('stored_details')
      .select(['account_id', 'facets', 'form', 'tag', 'body'])
      .where('resource_id', '=', '')
      .compile();
    compiledSearches.set(db, compiled);
  }
  return readNow({ ...compiled, parameters: [resourceId] });
}

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

/** Resources read and written per round of the builder, at most. */
const ROUND = 200;
/** Characters of stored text written per round, at most (a round ends early at this many). */
const ROUND_CHARS = 4 * 1024 * 1024;
/**
 * A detail whose answer is longer than this (its content is large) gets no row: it is read the way it
 * always is, content from its store, rather than copied into the database.
 */
export const MAX_STORED_CHARS = 1024 * 1024;
/** Ids of Resources listed per statement by a pass, and changes read per statement. */
const IDS_PER_READ = 1000;
/** Rows written per statement: a few hundred kilobytes of text, mostly. */
const ROWS_PER_INSERT = 50;
/** Resources asked for by reads (`request`) held at most; beyond, a read's ask is let go. */
const MAX_REQUESTED = 10_000;
/** How long the builder waits after a round failed (the database down, writes contended). */
const RETRY_MS = 5000;

/** A stored detail as the builder writes it. */
type NewStoredDetail = StoredDetailTable;

export interface StoredDetailsBuilderOptions {
  readonly logger?: FastifyBaseLogger;
  /** Resources read and written per round (a test makes it small). */
  readonly round?: number;
}

/**
 * Writes the stored details: at start, of every Resource the table has no row for; then of the
 * Resources and Catalogs the change log names, read from the log itself after the position the
 * builders recorded last (`stored_details_followed`), so that a change made while no instance of this
 * release was following (a process of an earlier release wrote it, and deleted no row) is caught up
 * with at the next start. One round at a time, each Resource yielding to requests, so that the work
 * never holds a request up.
 *
 * `reader` must read what the primary has committed, in order (a load-balanced set of replicas may
 * not): the head read before a round must not be newer than the rows read after it.
 */
export class StoredDetailsBuilder {
  /** Resources whose rows are to be written. */
  private readonly due = new Set<string>();
  /** Catalogs whose Resources' rows are to be written. */
  private readonly dueCatalogs = new Set<string>();
  /** Whether a pass over every Resource for rows the table lacks is due (at start). */
  private passDue = false;
  /** Whether the log may hold changes after `position` (a follower said so, or at start). */
  private logAhead = false;
  /** The `seq` of the last change whose Resources and Catalogs are due or written; read at start. */
  private position: number | undefined;
  private recorded: number | undefined;
  private running: Promise<void> | undefined;
  private retry: NodeJS.Timeout | undefined;
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

  /** Catches up with the log, writes the rows the table lacks, then follows `follower`'s changes. */
  start(follower: ChangeFollower): void {
    this.unfollow = follower.onChange(() => {
      this.logAhead = true;
      this.kick();
    });
    this.passDue = true;
    this.logAhead = true;
    this.kick();
  }

  /** Stops after the Resource being written; `settled` resolves once it is. */
  stop(): void {
    this.stopped = true;
    clearTimeout(this.retry);
    this.unfollow?.();
  }

  /** Resolves once everything due so far is written (or given up on until the next retry). */
  async settled(): Promise<void> {
    while (this.running) await this.running;
  }

  /** Asks for the row of one Resource (a read met none of the current form). */
  request(resourceId: string): void {
    // During a rollout every read may meet a row of the other form: what is held stays bounded, and
    // a Resource let go is asked for again by its next read.
    if (this.due.size >= MAX_REQUESTED) return;
    this.due.add(resourceId);
    this.kick();
  }

  /**
   * Catches up with the log and writes every row the table lacks, to the end: what `playbook details
   * build` runs. Returns how many rows it wrote.
   */
  async buildAll(): Promise<number> {
    // One pass at a time: a round already started finishes first, and none starts beside this one.
    await this.settled();
    this.passDue = true;
    this.logAhead = true;
    const work = this.work();
    this.running = work.then(
      () => undefined,
      () => undefined,
    );
    try {
      return await work;
    } finally {
      this.running = undefined;
      this.kick();
    }
  }

  private kick(): void {
    if (this.running || this.stopped || this.retry) return;
    if (!this.passDue && !this.logAhead && this.due.size === 0 && this.dueCatalogs.size === 0) return;
    this.running = this.work()
      .then(() => {
        this.running = undefined;
        this.kick();
      })
      .catch((error: unknown) => {
        // What was due stays due; its Resources are read the way they always are meanwhile.
        this.options.logger?.warn({ err: error }, 'stored details could not be written; trying again');
        this.running = undefined;
        this.retry = setTimeout(() => {
          this.retry = undefined;
          this.kick();
        }, RETRY_MS);
        this.retry.unref();
      });
  }

  /** Writes what is due, round by round; returns how many rows it wrote. */
  private async work(): Promise<number> {
    let written = 0;
    while (!this.stopped) {
      if (this.due.size > 0) {
        const ids = [...this.due].slice(0, this.round);
        written += await this.write(ids);
        for (const id of ids) this.due.delete(id);
      } else if (this.dueCatalogs.size > 0) {
        const [catalogId] = this.dueCatalogs as Set<string>;
        written += await this.pass(catalogId);
        this.dueCatalogs.delete(catalogId!);
      } else if (this.logAhead) {
        await this.readLog();
      } else if (this.passDue) {
        const passed = await this.pass(undefined);
        this.passDue = false;
        written += passed;
        this.options.logger?.info({ written: passed }, 'stored details written for every Resource');
      } else {
        await this.record();
        break;
      }
    }
    return written;
  }

  /**
   * Reads the next page of the log after `position`: its Resources, and the Catalogs whose changes
   * show in their Resources' details, become due. Only when what is due is written is a next page read,
   * so what is due stays within a page.
   */
  private async readLog(): Promise<void> {
    if (this.position === undefined) {
      const row = await this.reader
        .selectFrom('stored_details_followed')
        .select('seq')
        .where('id', '=', 1)
        .executeTakeFirstOrThrow();
      this.position = Number(row.seq);
      this.recorded = this.position;
    }
    const page = await this.reader
      .selectFrom('changes')
      .select(['seq', 'type', 'target_kind', 'target_id'])
      .where('seq', '>', this.position)
      .orderBy('seq')
      .limit(IDS_PER_READ)
      .execute();
    if (page.length < IDS_PER_READ) this.logAhead = false;
    for (const change of page) {
      if (change.target_kind === 'resource') this.due.add(change.target_id);
      else if (change.target_kind === 'catalog' && CATALOG_CHANGES_SHOWN.has(change.type)) {
        this.dueCatalogs.add(change.target_id);
      }
    }
    if (page.length > 0) this.position = Number(page.at(-1)!.seq);
  }

  /** Records how far the log is followed, once everything it named is written: the next start's. */
  private async record(): Promise<void> {
    const position = this.position;
    if (position === undefined || position === this.recorded) return;
    await this.writes.run('store-details', { actor: { type: 'service' } }, (write) =>
      write.db
        .updateTable('stored_details_followed')
        .set({ seq: position })
        .where('id', '=', 1)
        .where('seq', '<', position)
        .execute(),
    );
    this.recorded = position;
  }

  /**
   * Writes the rows of every Resource of one Catalog, or, without one, the rows the table lacks.
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
   * head read first (a change after it is in the log, and makes its Resource due again). A Resource its
   * owner does not see (a service draft), gone, too large to store, or whose detail cannot be read
   * (its content damaged, D12) has no row. Returns how many rows it wrote.
   */
  private async write(ids: readonly string[]): Promise<number> {
    let written = 0;
    let seen = await readHead(this.reader);
    let rows: NewStoredDetail[] = [];
    let chars = 0;
    const none: string[] = [];
    const flush = async () => {
      if (rows.length > 0 || none.length > 0) {
        const batch = rows;
        const gone = none.splice(0);
        written += await this.writes
          .run('store-details', { actor: { type: 'service' } }, async (write) => {
            // A row its Resource should not have goes, whenever that changed: deleting is never stale.
            for (const slice of chunk(gone, MAX_IN_LIST)) {
              await write.db.deleteFrom('stored_details').where('resource_id', 'in', slice).execute();
            }
            return storeWhenCurrent(write.db, batch, seen);
          })
          .then(({ stored, stale }) => {
            // The change that made a detail stale is in the log after the position: read on to it.
            if (stale) this.logAhead = true;
            return stored;
          });
      }
      rows = [];
      chars = 0;
    };
    for (const id of ids) {
      if (this.stopped) break;
      const body = await this.detailOf(id);
      if (body === undefined) none.push(id);
      else {
        rows.push(body);
        chars += body.body.length;
        if (chars >= ROUND_CHARS) {
          await flush();
          seen = await readHead(this.reader);
        }
      }
      await nextTurn();
    }
    await flush();
    return written;
  }

  /** The row of one Resource, read now; none when it should have none. */
  private async detailOf(id: string): Promise<NewStoredDetail | undefined> {
    let read: OwnerDetail | undefined;
    try {
      read = await this.read(id);
    } catch (error) {
      // One Resource that cannot be read holds up no other: it is read the way it always is.
      this.options.logger?.warn({ err: error, resourceId: id }, 'a stored detail could not be made');
      return undefined;
    }
    if (!read) return undefined;
    const body = this.serialize(read.detail);
    if (body.length > MAX_STORED_CHARS) return undefined;
    return {
      resource_id: id,
      catalog_id: read.detail.catalogId,
      account_id: read.accountId,
      facets: read.facets,
      form: STORED_DETAIL_FORM,
      tag: read.tag,
      body,
    };
  }
}

/**
 * Stores `rows`, read after the log's head was `seen`, in the writers' turn (the unit of work holds it):
 * each unless a change to its Resource or its Catalog was appended since. When the head moved without
 * changes (a process older than the log wrote), nothing is stored: what it changed is unknown. Returns
 * how many rows it stored, and whether any was stale.
 */
async function storeWhenCurrent(
  trx: Db,
  rows: readonly NewStoredDetail[],
  seen: number,
): Promise<{ stored: number; stale: boolean }> {
  if (rows.length === 0) return { stored: 0, stale: false };
  const head = await readHead(trx);
  const { count } = await trx
    .selectFrom('changes')
    .select((eb) => eb.fn.countAll<number | string>().as('count'))
    .where('seq', '>', seen)
    .executeTakeFirstOrThrow();
  if (Number(count) !== head - seen) return { stored: 0, stale: true };
  // What changed since: one search of the log's index by the Resources and Catalogs of the round.
  const targets = [...new Set(rows.flatMap((row) => [row.resource_id, row.catalog_id]))];
  const changed = new Set<string>();
  for (const slice of chunk(targets, MAX_IN_LIST)) {
    const found = await trx
      .selectFrom('changes')
      .select('target_id')
      .where('target_id', 'in', slice)
      .where('seq', '>', seen)
      .execute();
    for (const { target_id } of found) changed.add(target_id);
  }
  const current = rows.filter((row) => !changed.has(row.resource_id) && !changed.has(row.catalog_id));
  for (const slice of chunk(current, ROWS_PER_INSERT)) {
    await trx
      .insertInto('stored_details')
      .values(slice)
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
  const stored = current.length;
  const stale = stored < rows.length;
  return { stored, stale };
}
