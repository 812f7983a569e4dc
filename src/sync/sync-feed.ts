import type { CredentialCheck, Principal } from '../auth/principal.js';
import { viewNamespaces } from '../catalog/audience.js';
import { toResourceListItem } from '../catalog/mappers.js';
import type { VisibleCatalog } from '../catalog/read-repository.js';
import {
  admittedCatalogs,
  inVisibleCatalogs,
  placeOf,
  visibleCatalogAt,
  visibleCatalogs,
  visibleCatalogsAfter,
  visibleResources,
  visibleResourcesAfter,
} from '../catalog/sync-reads.js';
import { readHead, SERVICE_NAMESPACE } from '../changes/change-log.js';
import {
  catalogsRestatedIn,
  firstChangeAfter,
  lastEntityChanges,
  type Stretch,
} from '../changes/entity-changes.js';
import type { Db } from '../db/tables.js';
import {
  AuthenticationError,
  CapacityError,
  InputError,
  RateLimitError,
  SyncTokenError,
} from '../foundation/errors.js';
import { type CountedSeries, Metrics } from '../observability/metrics.js';
import { DEFAULT_SYNC_PAGE_SIZE, type SyncQuery } from '../schemas/sync.js';
import { type ChangeWaits, holderOf, type WaitOutcome } from './change-waits.js';
import { catalogItem, type FeedItem, type PinsSource, pinsSource } from './feed-items.js';
import { type InitialCursor, type Position, type SyncTokens, type View, viewOf } from './sync-tokens.js';

/** One page of the feed, and exactly one of the two positions to go on from. */
export type SyncAnswer =
  | { readonly data: FeedItem[]; readonly nextPageToken: string; readonly nextSyncToken?: undefined }
  | { readonly data: FeedItem[]; readonly nextSyncToken: string; readonly nextPageToken?: undefined };

/** What a page was, as the metrics count it. */
export type PageKind = 'initial' | 'delta' | 'empty';

export interface SyncFeedOptions {
  /** How far back a position may be (`PLAYBOOK_SYNC_RETENTION_S`). */
  readonly retentionS: number;
  /** Now, in milliseconds since the epoch (tests move it). */
  readonly now?: () => number;
  readonly metrics?: Metrics;
  /** What is known of the log in memory, and the held requests; without it every read asks the database. */
  readonly waits?: ChangeWaits;
  /** Checks a held request's credential again before it answers (D27). */
  readonly credentials: CredentialCheck;
}

/** Pins a page of Catalogs may hold beyond its first Catalog: the size of the page stays in bounds. */
const PAGE_PIN_BUDGET = 10_000;
/** Entities of the log one page looks at: a stretch of changes hidden from the caller ends a page early. */
const MAX_SCANNED = 1000;
/** Catalogs an initial page steps through: many empty ones end a page early. */
const MAX_CATALOG_STEPS = 200;

/**
 * The sync feed (D27): an initial sync of every Catalog and Resource a caller sees, then, from the
 * position it ends at, what changed since, read from the change log (D26).
 *
 * - An initial sync takes the log's head before it reads anything and ends at that position, so a
 *   change committed while its pages are read is sent again by the next sync: nothing is lost, at
 *   the price of an entity sent twice.
 * - A delta is the Catalogs and Resources of the caller's namespaces (its account's and the service's)
 *   changed in `(position, head]`, each once, at its last change there, as it is now, or `removed` when
 *   the caller no longer sees it (visibility.ts decides, as for every read). A Resource hidden because
 *   its Catalog is needs no entry of its own: a removed Catalog takes its Resources with it. A service
 *   Catalog whose status may have changed (a change of its own fields, or an archive: either may
 *   take it out of draft) is followed by its visible Resources that did not change, since they may
 *   have come into view with it.
 * - A position names the view it was made for (sync-tokens.ts): another account's is 400, one made
 *   before the caller's plan or its key's restrictions changed is 410, as is one whose next change is
 *   older than the retention. A key restricted to some Catalogs (D32) is never told of another, not
 *   even that it left.
 */
export class SyncFeed {
  private readonly retentionMs: number;
  private readonly now: () => number;
  /** The pages of changes being read now, by view, stretch and size (`sharedDeltaPage`). */
  private readonly reading = new Map<string, Promise<SyncAnswer>>();
  /** The pages' series of the metrics (D25), bound once: an empty poll is as frequent as any read. */
  private readonly pages: Record<PageKind, CountedSeries<'kind'>>;
  private readonly metrics: Metrics;

  /** Where the pages' Catalogs' pins are read as a page is written (their items name them). */
  readonly pins: PinsSource;

  constructor(
    private readonly db: Db,
    private readonly tokens: SyncTokens,
    private readonly options: SyncFeedOptions,
  ) {
    this.pins = pinsSource(db);
    this.retentionMs = options.retentionS * 1000;
    this.now = options.now ?? Date.now;
    const metrics = options.metrics ?? new Metrics();
    this.metrics = metrics;
    this.pages = {
      initial: metrics.syncPages.bind({ kind: 'initial' }),
      delta: metrics.syncPages.bind({ kind: 'delta' }),
      empty: metrics.syncPages.bind({ kind: 'empty' }),
    };
  }

  /**
   * The answer to a poll at a position after which nothing of the caller's changed, when that is
   * known in memory: without a promise or a query, as a read held in memory is answered (the most
   * frequent request of a follower that polls). Undefined when the feed must be read (`read`).
   */
  readFromMemory(principal: Principal, query: SyncQuery): SyncAnswer | undefined {
    const token = query.syncToken;
    if (token === undefined || query.pageToken !== undefined || (query.wait ?? 0) > 0) return undefined;
    const view = viewOf(principal);
    const position = this.opened(token, 'syncToken', view);
    if (position.kind !== 'sync') return undefined;
    const quiet = this.options.waits?.quietSince(position.seq, viewNamespaces(principal));
    if (quiet === undefined) return undefined;
    this.pages.empty.inc();
    return this.emptyAt(view, token, position.seq, quiet);
  }

  /** An empty page at `quiet`: the token asked with when it names that position already. */
  private emptyAt(view: View, token: string, seq: number, quiet: number): SyncAnswer {
    return {
      data: [],
      nextSyncToken: quiet <= seq ? token : this.tokens.seal({ kind: 'sync', view, seq: quiet }),
    };
  }

  /** One page of the feed for `principal`; `signal` ends a held request early (its client went away). */
  async read(principal: Principal, query: SyncQuery, signal?: AbortSignal): Promise<SyncAnswer> {
    const { answer, kind } = await this.page(principal, query, signal);
    this.pages[kind].inc();
    return answer;
  }

  private async page(
    principal: Principal,
    query: SyncQuery,
    signal: AbortSignal | undefined,
  ): Promise<{ answer: SyncAnswer; kind: PageKind }> {
    if (query.syncToken !== undefined && query.pageToken !== undefined) {
      throw InputError.of('query', 'pageToken', 'give syncToken or pageToken, not both');
    }
    if (query.wait !== undefined && query.syncToken === undefined) {
      throw InputError.of('query', 'wait', 'is taken with syncToken only');
    }
    const size = query.pageSize ?? DEFAULT_SYNC_PAGE_SIZE;
    const view = viewOf(principal);
    if (query.pageToken !== undefined) {
      const position = this.opened(query.pageToken, 'pageToken', view);
      if (position.kind === 'initial') {
        await this.checkReach(position.seq, 'pageToken');
        return {
          answer: await this.initialPage(principal, position.seq, position.cursor, size),
          kind: 'initial',
        };
      }
      if (position.kind === 'delta') {
        await this.checkReach(position.after, 'pageToken');
        const stretch = { from: position.from, upto: position.upto };
        const answer = await this.deltaPage(principal, stretch, position.after, position.expansion, size);
        return { answer, kind: answer.data.length === 0 ? 'empty' : 'delta' };
      }
    }
    if (query.syncToken !== undefined) {
      const position = this.opened(query.syncToken, 'syncToken', view);
      if (position.kind === 'sync') {
        const answer = await this.changesSince(
          principal,
          query.syncToken,
          position.seq,
          size,
          query.wait ?? 0,
          signal,
        );
        return { answer, kind: answer.data.length === 0 ? 'empty' : 'delta' };
      }
    }
    const head = await readHead(this.db);
    return { answer: await this.initialPage(principal, head, { phase: 'catalogs' }, size), kind: 'initial' };
  }

  /** The position a token names, refused unless it was made for this caller's view. */
  private opened(token: string, parameter: 'syncToken' | 'pageToken', view: View): Position {
    const position = this.tokens.open(token, parameter);
    if (position.view.accountId !== view.accountId) {
      throw new SyncTokenError(
        `${parameter} was made for another account's view; start again with an initial sync`,
        'invalid_sync_token',
        parameter,
      );
    }
    // The view is not the one the follower holds a copy of: what it may read has changed (D6, D32).
    const changed =
      position.view.plan !== view.plan
        ? "the account's plan"
        : position.view.restrictions !== view.restrictions
          ? "the API key's restrictions"
          : undefined;
    if (changed !== undefined) {
      throw new SyncTokenError(
        `${parameter} was made before ${changed} changed; start again with an initial sync`,
        'sync_token_expired',
        parameter,
      );
    }
    return position;
  }

  /**
   * A position is served only while the log keeps what came after it: the first change after it must be
   * younger than the retention (the log may be pruned past it), and a position the log never reached
   * (a database restored from an older backup) is refused too.
   */
  private async checkReach(seq: number, parameter: 'syncToken' | 'pageToken'): Promise<void> {
    const first = await firstChangeAfter(this.db, seq);
    if (first !== undefined && Date.parse(first.at) < this.now() - this.retentionMs) {
      throw new SyncTokenError(
        `${parameter} is older than the change log keeps (${describeSeconds(this.options.retentionS)}); start again with an initial sync`,
        'sync_token_expired',
        parameter,
      );
    }
  }

  /**
   * What changed after `seq` (the position of `token`). When nothing did and `waitS` allows, the request
   * is held until a change of the caller's namespaces is known on this instance, or answered empty at
   * the end, at the same position.
   */
  private async changesSince(
    principal: Principal,
    token: string,
    seq: number,
    size: number,
    waitS: number,
    signal: AbortSignal | undefined,
  ): Promise<SyncAnswer> {
    const view = viewOf(principal);
    const namespaces = viewNamespaces(principal);
    const emptyAt = (position: number): SyncAnswer => this.emptyAt(view, token, seq, position);
    let quiet = this.options.waits?.quietSince(seq, namespaces);
    if (quiet === undefined) {
      const head = await readHead(this.db);
      // A position ahead of the log as read here: this instance's reads are behind another's (a replica).
      if (head <= seq) {
        quiet = seq;
      } else {
        await this.checkReach(seq, 'syncToken');
        const answer = await this.deltaPage(principal, { from: seq, upto: head }, seq, undefined, size);
        if (answer.data.length > 0 || answer.nextPageToken !== undefined) return answer;
        quiet = head;
      }
    }
    const waits = this.options.waits;
    if (waitS === 0 || !waits) return emptyAt(quiet);
    const deadline = this.now() + waitS * 1000;
    const holder = holderOf(principal);
    for (let woken = false; ; woken = true) {
      let outcome: WaitOutcome;
      try {
        outcome = await waits.wait(namespaces, quiet, deadline - this.now(), holder, signal);
      } catch (error) {
        // Woken by a change it does not see, a request whose place was taken meanwhile has been held:
        // it answers empty at its new position rather than refused.
        if (woken && (error instanceof RateLimitError || error instanceof CapacityError))
          return emptyAt(quiet);
        throw error;
      }
      if (outcome.kind === 'aborted') return emptyAt(quiet);
      await this.recheck(principal);
      if (outcome.kind !== 'changed') return emptyAt(quiet);
      const head = outcome.position ?? (await readHead(this.db));
      if (head > quiet) {
        // Requests held at one position of one view, woken by one change, read it once together.
        const answer = await this.sharedDeltaPage(principal, { from: quiet, upto: head }, size);
        if (answer.data.length > 0 || answer.nextPageToken !== undefined) return answer;
        quiet = head;
      }
      if (this.now() >= deadline) return emptyAt(quiet);
    }
  }

  /**
   * A request held for a while answers only while its credential is still accepted: one revoked,
   * rolled past its overlap or expired meanwhile gets the 401 a new request with it would get, never
   * what changed. Memory answers it in the common case (credential-authenticator.ts).
   */
  private async recheck(principal: Principal): Promise<void> {
    try {
      await this.options.credentials.recheck(principal);
    } catch (error) {
      if (error instanceof AuthenticationError)
        this.metrics.syncHeldRefusals.inc({ reason: 'unauthenticated' });
      throw error;
    }
  }

  /**
   * The first page of the changes in `stretch` for `principal`'s view, read once for every request
   * that asks for the same one while it is being read (a thousand followers of one account, woken by
   * one change). The answer depends on the view, the stretch and the size alone.
   */
  private sharedDeltaPage(principal: Principal, stretch: Stretch, size: number): Promise<SyncAnswer> {
    const { accountId, plan, restrictions } = viewOf(principal);
    const key = JSON.stringify([accountId, plan, restrictions, stretch.from, stretch.upto, size]);
    let pending = this.reading.get(key);
    if (!pending) {
      pending = this.deltaPage(principal, stretch, stretch.from, undefined, size).finally(() =>
        this.reading.delete(key),
      );
      this.reading.set(key, pending);
    }
    return pending;
  }

  /** A page of an initial sync that began at the log's `seq`, from `cursor`. */
  private async initialPage(
    principal: Principal,
    seq: number,
    start: InitialCursor,
    size: number,
  ): Promise<SyncAnswer> {
    const view = viewOf(principal);
    const items: FeedItem[] = [];
    const more = (cursor: InitialCursor): SyncAnswer => ({
      data: items,
      nextPageToken: this.tokens.seal({ kind: 'initial', view, seq, cursor }),
    });
    const done = (): SyncAnswer => ({
      data: items,
      nextSyncToken: this.tokens.seal({ kind: 'sync', view, seq }),
    });

    let cursor = start;
    let current: VisibleCatalog | undefined;
    if (cursor.phase === 'catalogs') {
      const heads = await visibleCatalogsAfter(this.db, principal, cursor.after, size + 1);
      // A Catalog's answer grows with its pins: a page of large ones holds one, however many fit.
      const chosen = [];
      let pins = 0;
      for (const head of heads) {
        if (chosen.length >= size || (chosen.length > 0 && pins + head.pins > PAGE_PIN_BUDGET)) break;
        chosen.push(head);
        pins += head.pins;
      }
      const rows = new Map(
        (
          await visibleCatalogs(
            this.db,
            principal,
            chosen.map((head) => head.id),
          )
        ).map((row) => [row.catalog.id, row]),
      );
      for (const head of chosen) {
        const row = rows.get(head.id);
        if (row) items.push(catalogItem(row));
      }
      const last = chosen.at(-1);
      if (last && chosen.length < heads.length) return more({ phase: 'catalogs', after: placeOf(last) });
      // Every Catalog is sent: their Resources follow, Catalog by Catalog in the same order.
      [current] = await visibleCatalogsAfter(this.db, principal, undefined, 1);
      if (!current) return done();
      cursor = { phase: 'resources', catalog: placeOf(current), afterSlug: '' };
      if (items.length >= size) return more(cursor);
    } else {
      current = await visibleCatalogAt(this.db, principal, cursor.catalog);
    }

    for (let steps = 0; ; steps++) {
      if (current) {
        const need = size - items.length;
        const rows = await visibleResourcesAfter(this.db, current, cursor.afterSlug, need + 1);
        for (const row of rows.slice(0, need)) {
          items.push({ type: 'resource', resource: toResourceListItem(row) });
          cursor = { ...cursor, afterSlug: row.resource.slug };
        }
        if (rows.length > need) return more(cursor);
      }
      if (cursor.phase !== 'resources')
        throw new Error('an initial sync stepped through Catalogs out of phase');
      [current] = await visibleCatalogsAfter(this.db, principal, cursor.catalog, 1);
      if (!current) return done();
      cursor = { phase: 'resources', catalog: placeOf(current), afterSlug: '' };
      if (items.length >= size || steps >= MAX_CATALOG_STEPS) return more(cursor);
    }
  }

  /**
   * A page of the changes in `stretch`: the entities whose last change there comes after `after`,
   * and first the rest of a Catalog's Resources when `expansion` says one was being sent.
   */
  private async deltaPage(
    principal: Principal,
    stretch: Stretch,
    start: number,
    startExpansion: { readonly catalogId: string; readonly afterSlug: string } | undefined,
    size: number,
  ): Promise<SyncAnswer> {
    const view = viewOf(principal);
    const namespaces = viewNamespaces(principal);
    const items: FeedItem[] = [];
    let after = start;
    let expansion = startExpansion;
    const more = (): SyncAnswer => ({
      data: items,
      nextPageToken: this.tokens.seal({
        kind: 'delta',
        view,
        from: stretch.from,
        upto: stretch.upto,
        after,
        ...(expansion ? { expansion } : {}),
      }),
    });
    let scanned = 0;
    for (;;) {
      if (expansion) {
        const [row] = await visibleCatalogs(this.db, principal, [expansion.catalogId]);
        if (row) {
          const need = size - items.length;
          if (need === 0) return more();
          const resources = await visibleResourcesAfter(
            this.db,
            row.catalog,
            expansion.afterSlug,
            need + 1,
            stretch,
          );
          for (const resource of resources.slice(0, need)) {
            items.push({ type: 'resource', resource: toResourceListItem(resource) });
            expansion = { catalogId: expansion.catalogId, afterSlug: resource.resource.slug };
          }
          if (resources.length > need) return more();
        }
        expansion = undefined;
      }
      const room = size - items.length;
      const batch = await lastEntityChanges(this.db, namespaces, stretch, after, Math.max(room, 1));
      if (batch.length === 0) {
        return { data: items, nextSyncToken: this.tokens.seal({ kind: 'sync', view, seq: stretch.upto }) };
      }
      if (room === 0 || scanned >= MAX_SCANNED) return more();
      scanned += batch.length;

      const catalogIds = batch.filter((entity) => entity.kind === 'catalog').map((entity) => entity.id);
      const resourceIds = batch.filter((entity) => entity.kind === 'resource').map((entity) => entity.id);
      const catalogs = new Map(
        (await visibleCatalogs(this.db, principal, catalogIds)).map((row) => [row.catalog.id, row]),
      );
      const resources = new Map(
        (await visibleResources(this.db, principal, resourceIds)).map((row) => [row.resource.id, row]),
      );
      const told = await admittedCatalogs(
        this.db,
        principal,
        catalogIds.filter((id) => !catalogs.has(id)),
      );
      const hiddenAlone = await inVisibleCatalogs(
        this.db,
        principal,
        resourceIds.filter((id) => !resources.has(id)),
      );
      const serviceCatalogs = [...catalogs.values()]
        .filter((row) => row.catalog.account_id === null)
        .map((row) => row.catalog.id);
      const updated = await catalogsRestatedIn(this.db, serviceCatalogs, stretch);

      for (const entity of batch) {
        after = entity.seq;
        if (entity.kind === 'catalog') {
          const row = catalogs.get(entity.id);
          if (!row) {
            if (told.has(entity.id)) items.push({ type: 'removed', entity: 'catalog', id: entity.id });
            continue;
          }
          items.push(catalogItem(row));
          if (entity.namespace === SERVICE_NAMESPACE && updated.has(entity.id)) {
            // Its Resources may have come into view with it: sent next, before the rest of the batch.
            expansion = { catalogId: entity.id, afterSlug: '' };
            break;
          }
        } else {
          const row = resources.get(entity.id);
          if (row) items.push({ type: 'resource', resource: toResourceListItem(row) });
          else if (hiddenAlone.has(entity.id))
            items.push({ type: 'removed', entity: 'resource', id: entity.id });
        }
      }
    }
  }
}

function describeSeconds(seconds: number): string {
  if (seconds % 86_400 === 0) return `${seconds / 86_400} day${seconds === 86_400 ? '' : 's'}`;
  if (seconds % 3600 === 0) return `${seconds / 3600} hour${seconds === 3600 ? '' : 's'}`;
  return `${seconds} seconds`;
}
