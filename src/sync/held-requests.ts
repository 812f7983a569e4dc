import type { FollowedChanges } from '../changes/change-follower.js';
import { CapacityError } from '../foundation/errors.js';
import type { ChangeWaits, WaitOutcome } from './sync-feed.js';

/** What the held requests follow: this instance's follower of the change log (D26). */
export interface FollowedLog {
  onChange(listener: (followed: FollowedChanges) => void): () => void;
  /** The position of the log up to which every change has been told to the listeners. */
  readonly toldUpTo: number | undefined;
}

export interface HeldRequestsOptions {
  /** Requests held at once (`PLAYBOOK_SYNC_MAX_WAITERS`); one more is refused with 503. */
  readonly maxHeld: number;
  /** What a refused request is told to wait before it asks again, in seconds. */
  readonly retryAfterSeconds?: number;
}

const DRAINED: WaitOutcome = { kind: 'drained' };
const ABORTED: WaitOutcome = { kind: 'aborted' };
const TIMED_OUT: WaitOutcome = { kind: 'timeout' };

/** Namespaces whose last change is kept in memory. */
const MAX_NAMESPACES = 100_000;

interface Waiter {
  readonly namespaces: readonly string[];
  /** Woken by a change after this position. */
  readonly after: number;
  settle(outcome: WaitOutcome): void;
}

/**
 * What this instance knows of the change log without asking the database, and the sync requests held
 * until something changes (D27). Both follow the change follower, which learns of a commit on any
 * instance within its poll (half a second) or at once through Redis: a held request is woken within
 * a second of a change in one of its namespaces, and then reads what changed.
 *
 * Since the first change it was told of (or the follower's first position), it keeps the last
 * position of each namespace's Catalog and Resource changes: a caller asking at a position after
 * which nothing of its namespaces changed is answered from memory, without a query. A held request
 * costs a promise, a timer and an entry in a set: no database connection, and no read until a change
 * of its namespaces is known.
 */
export class HeldRequests implements ChangeWaits {
  /** From here on every change told is in `lastChange`; unset until something is known. */
  private knownFrom: number | undefined;
  /** The position the follower has told up to, as the last change told to this says. */
  private position: number | undefined;
  private readonly lastChange = new Map<string, number>();
  /** Held requests by namespace; a request of an account and the service is in both sets. */
  private readonly byNamespace = new Map<string, Set<Waiter>>();
  private held = 0;
  private draining = false;
  private readonly unfollow: () => void;

  constructor(
    private readonly log: FollowedLog,
    private readonly options: HeldRequestsOptions,
  ) {
    this.unfollow = log.onChange((followed) => this.follow(followed));
  }

  /** Requests held now. */
  get count(): number {
    return this.held;
  }

  quietSince(after: number, namespaces: readonly string[]): number | undefined {
    const known = this.known();
    if (!known || after < known.from || after > known.position) return undefined;
    for (const namespace of namespaces) {
      if ((this.lastChange.get(namespace) ?? 0) > after) return undefined;
    }
    return known.position;
  }

  wait(namespaces: readonly string[], after: number, ms: number, signal?: AbortSignal): Promise<WaitOutcome> {
    if (this.draining) return Promise.resolve(DRAINED);
    if (signal?.aborted) return Promise.resolve(ABORTED);
    if (ms <= 0) return Promise.resolve(TIMED_OUT);
    // Something may have been told between the caller's read and now.
    const known = this.known();
    if (!known || after < known.from) return Promise.resolve({ kind: 'changed', position: undefined });
    if (namespaces.some((namespace) => (this.lastChange.get(namespace) ?? 0) > after)) {
      return Promise.resolve({ kind: 'changed', position: known.position });
    }
    if (this.held >= this.options.maxHeld) {
      throw new CapacityError(
        'This instance holds as many waiting sync requests as it may; ask again after Retry-After, or without wait.',
        { retryAfterSeconds: this.options.retryAfterSeconds ?? 2 },
      );
    }
    return new Promise((resolve) => {
      let timer: NodeJS.Timeout | undefined;
      const onAbort = () => waiter.settle(ABORTED);
      const waiter: Waiter = {
        namespaces,
        after,
        settle: (outcome) => {
          clearTimeout(timer);
          signal?.removeEventListener('abort', onAbort);
          for (const namespace of namespaces) this.byNamespace.get(namespace)?.delete(waiter);
          this.held--;
          resolve(outcome);
          // Settled once: a second call (a change and the timer at once) does nothing.
          waiter.settle = () => {};
        },
      };
      this.held++;
      for (const namespace of namespaces) {
        let set = this.byNamespace.get(namespace);
        if (!set) {
          set = new Set();
          this.byNamespace.set(namespace, set);
        }
        set.add(waiter);
      }
      timer = setTimeout(() => waiter.settle(TIMED_OUT), ms);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  /** Answers every held request now, and holds none from now on: the instance is stopping. */
  drain(): void {
    this.draining = true;
    for (const waiter of this.allWaiters()) waiter.settle(DRAINED);
  }

  close(): void {
    this.unfollow();
    this.drain();
  }

  private known(): { from: number; position: number } | undefined {
    if (this.knownFrom !== undefined && this.position !== undefined) {
      return { from: this.knownFrom, position: this.position };
    }
    // Nothing told yet: the follower has not moved since its first read, whose position it keeps.
    const told = this.log.toldUpTo;
    return told === undefined ? undefined : { from: told, position: told };
  }

  private follow(followed: FollowedChanges): void {
    if (followed.startAfresh) {
      // What changed is not known: from here on it is, and every held request reads again.
      this.knownFrom = followed.seq;
      this.position = followed.seq;
      this.lastChange.clear();
      for (const waiter of this.allWaiters()) waiter.settle({ kind: 'changed', position: undefined });
      return;
    }
    const first = followed.changes[0];
    if (first === undefined) return;
    this.knownFrom ??= first.seq - 1;
    this.position = followed.seq;
    const touched = new Map<string, number>();
    for (const change of followed.changes) {
      // Catalogs and Resources are what a sync sends; key events and plans are not.
      if (change.target.kind !== 'catalog' && change.target.kind !== 'resource') continue;
      this.lastChange.set(change.namespace, change.seq);
      touched.set(change.namespace, change.seq);
    }
    // Every caller's view holds the service's namespace, so a service change is in every set.
    for (const [namespace, seq] of touched) {
      for (const waiter of [...(this.byNamespace.get(namespace) ?? [])]) {
        // The position told: every waiter woken by this change reads up to it, and alike ones share the read.
        if (seq > waiter.after) waiter.settle({ kind: 'changed', position: followed.seq });
      }
    }
    if (this.lastChange.size > MAX_NAMESPACES) {
      // Bounded whatever the number of accounts: forgetting costs a query per caller, not a wrong answer.
      this.lastChange.clear();
      this.knownFrom = followed.seq;
    }
  }

  private allWaiters(): Set<Waiter> {
    const all = new Set<Waiter>();
    for (const set of this.byNamespace.values()) for (const waiter of set) all.add(waiter);
    return all;
  }
}
