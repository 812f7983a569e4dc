import { credentialKey, type Principal } from '../auth/principal.js';

/**
 * What the sync feed (sync-feed.ts) and the requests it holds (held-requests.ts) agree on: how a
 * request waits for a change, who holds it, and how its wait ends (D27).
 */

/**
 * Where the feed learns, without asking the database, that nothing of some namespaces changed, and
 * waits until something does (held-requests.ts).
 */
export interface ChangeWaits {
  /** The log position up to which nothing of `namespaces` changed after `after`, when that is known. */
  quietSince(after: number, namespaces: readonly string[]): number | undefined;
  /**
   * Resolves when a change of `namespaces` after `after` is known, or at the end of `ms`, or at a drain.
   * Throws at once (`RateLimitError`, `CapacityError`) when `holder` or the instance may hold no more.
   */
  wait(
    namespaces: readonly string[],
    after: number,
    ms: number,
    holder: Holder,
    signal?: AbortSignal,
  ): Promise<WaitOutcome>;
}

/**
 * Who holds a request, as the shares of held requests count it (D27): the credential (a key id, or an
 * access token's user), and the account it acts for (a token that acts for none counts as its user's own).
 */
export interface Holder {
  readonly credential: string;
  readonly account: string;
}

export function holderOf(principal: Principal): Holder {
  const credential = credentialKey(principal.credential);
  return {
    credential,
    account: principal.accountId === null ? credential : `account:${principal.accountId}`,
  };
}

/**
 * How a wait ended: a change, with the log's position it was told at (undefined when what changed is
 * not known: the log is read again), the end of the wait, the instance stopping, or the client gone.
 */
export type WaitOutcome =
  | { readonly kind: 'changed'; readonly position: number | undefined }
  | { readonly kind: 'timeout' | 'drained' | 'aborted' };
