import { PlaybookError } from './errors.js';
import type { components, operations } from './openapi.js';
import { type CallOptions, sleep, type Transport } from './transport.js';

type Schemas = components['schemas'];

/** A Catalog as it is now, as the Catalogs list shows it. */
export type SyncCatalogItem = Schemas['SyncCatalogItem'];
/** A Resource as it is now, as a list item (no content: fetch the Resource for it). */
export type SyncResourceItem = Schemas['SyncResourceItem'];
/** What the caller no longer sees: drop it; a removed Catalog takes its Resources with it. */
export type SyncRemovedItem = Schemas['SyncRemovedItem'];
export type SyncItem = SyncCatalogItem | SyncResourceItem | SyncRemovedItem;
/** One page of a sync as the service answers it: exactly one of `nextPageToken` and `nextSyncToken`. */
export type SyncPage = Schemas['SyncPage'];
export type SyncQuery = NonNullable<operations['syncPlaybook']['parameters']['query']>;

/** Options of a sync call: those of every call, a signal to end it and headers of its own. */
export type SyncCallOptions = CallOptions;

export interface SyncIterateOptions extends SyncCallOptions {
  /** Where an earlier sync ended (its `nextSyncToken`): what changed since. Without it, an initial sync. */
  readonly syncToken?: string;
  /** Items per page, 1-100; the service's default (100) when not given. */
  readonly pageSize?: number;
}

export interface SyncFollowOptions extends SyncIterateOptions {
  /**
   * Seconds each request waits for a change when there is none yet (0-60); 30 by default, under the
   * idle timeout of most load balancers.
   */
  readonly waitSeconds?: number;
  /** The longest pause after a failure; the pauses grow from the client's `retryBaseMs` up to it. 30 s. */
  readonly maxBackoffMs?: number;
  /** Told of each failure that `follow` rides out (a network error, a 5xx after the client's retries). */
  readonly onError?: (error: unknown) => void;
}

/** A page as `follow` yields it: the service's page, and where it stands in the follower's sync. */
export interface FollowedPage {
  readonly data: SyncItem[];
  /** Set on the last page of a sync: the position to keep, and to resume from. */
  readonly nextSyncToken?: string;
  readonly nextPageToken?: string;
  /** A page of an initial sync: every Catalog and Resource the caller sees, rather than changes. */
  readonly initial: boolean;
  /**
   * The first page of an initial sync that replaces a position the service no longer takes (410
   * `sync_token_expired`): what the follower holds is stale. Keep what this initial sync sends, and
   * drop what it did not send once its last page (with `nextSyncToken`) has come.
   */
  readonly restarted: boolean;
}

/** Refusals that `follow` rides out, besides those without an answer: the service may mend. */
const PASSING = new Set([408, 429]);

/**
 * The sync feed: an initial sync of every Catalog and Resource the caller can see, then what changed.
 *
 * @example
 * // Once: everything, page by page; keep the last page's nextSyncToken.
 * for await (const page of playbook.sync.iterate()) apply(page.data);
 * // For good: changes as they happen, from where the last run stopped.
 * for await (const page of playbook.sync.follow({ syncToken: saved })) {
 *   apply(page.data);
 *   if (page.nextSyncToken) saved = page.nextSyncToken;
 * }
 */
export class PlaybookSync {
  constructor(private readonly transport: Transport) {}

  /** One page: `syncToken` (with `wait`), `pageToken`, or neither for the first page of an initial sync. */
  page(
    query: SyncQuery = {},
    options: SyncCallOptions & { readonly timeoutMs?: number } = {},
  ): Promise<SyncPage> {
    return this.transport.send<SyncPage>({
      operation: 'syncPlaybook',
      method: 'GET',
      path: 'v3/playbook/sync',
      query,
      idempotent: true,
      signal: options.signal,
      callerHeaders: options.headers,
      timeoutMs: options.timeoutMs,
      // Every page is asked once: keeping them would only fill the cache.
      uncached: true,
    });
  }

  /**
   * Every page of one sync: the initial sync, or what changed since `syncToken`, following each
   * `nextPageToken` until a page gives `nextSyncToken` (the last page yielded carries it).
   */
  async *iterate(options: SyncIterateOptions = {}): AsyncGenerator<SyncPage, void, undefined> {
    const { syncToken, pageSize, ...call } = options;
    let query: SyncQuery = { ...(syncToken === undefined ? {} : { syncToken }), ...sized(pageSize) };
    for (;;) {
      const page = await this.page(query, call);
      yield page;
      if (page.nextPageToken === undefined) return;
      query = { pageToken: page.nextPageToken, ...sized(pageSize) };
    }
  }

  /**
   * Follows the feed for good: an initial sync (or what changed since `syncToken`), then requests that
   * the service holds until something changes (`waitSeconds`), yielding each page that says something:
   * items, or a new position. It never ends on its own; end it with `signal` or by leaving the loop.
   *
   * A failure the client's retries did not mend (the service unreachable, a 5xx, a 429) is ridden
   * out: a pause that grows with each failure in a row (full jitter, up to `maxBackoffMs`), then the
   * same request again, from the last position. A position the service no longer takes (410) starts
   * an initial sync over, its first page marked `restarted`. Any other refusal (a revoked key, a
   * position of another account) ends the loop with its `PlaybookError`.
   */
  async *follow(options: SyncFollowOptions = {}): AsyncGenerator<FollowedPage, never, undefined> {
    const { pageSize, waitSeconds = 30, maxBackoffMs = 30_000, onError, signal, headers } = options;
    let syncToken = options.syncToken;
    let pageToken: string | undefined;
    let restarted = false;
    let failures = 0;
    for (;;) {
      const query: SyncQuery =
        pageToken !== undefined
          ? { pageToken, ...sized(pageSize) }
          : syncToken !== undefined
            ? { syncToken, wait: waitSeconds, ...sized(pageSize) }
            : sized(pageSize);
      let page: SyncPage;
      try {
        page = await this.page(query, {
          ...(signal ? { signal } : {}),
          ...(headers ? { headers } : {}),
          // A held request is answered within the wait; the margin covers the answer itself.
          ...(query.wait === undefined ? {} : { timeoutMs: (query.wait + 30) * 1000 }),
        });
      } catch (error) {
        if (signal?.aborted) throw signal.reason;
        if (error instanceof PlaybookError && error.status === 410) {
          onError?.(error);
          syncToken = undefined;
          pageToken = undefined;
          restarted = true;
          continue;
        }
        if (
          error instanceof PlaybookError &&
          error.status !== 0 &&
          error.status < 500 &&
          !PASSING.has(error.status)
        ) {
          throw error;
        }
        onError?.(error);
        failures++;
        await sleep(Math.min(maxBackoffMs, this.transport.backoffMs(failures)), signal);
        continue;
      }
      failures = 0;
      const initial = syncToken === undefined;
      const first = initial && pageToken === undefined;
      const moved = page.nextPageToken !== undefined || page.nextSyncToken !== syncToken;
      if (page.data.length > 0 || moved || first) {
        yield { ...page, initial, restarted: restarted && first };
      }
      if (page.nextPageToken !== undefined) {
        pageToken = page.nextPageToken;
      } else {
        pageToken = undefined;
        syncToken = page.nextSyncToken;
        restarted = false;
      }
    }
  }
}

function sized(pageSize: number | undefined): SyncQuery {
  return pageSize === undefined ? {} : { pageSize };
}
