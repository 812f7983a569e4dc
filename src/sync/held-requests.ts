import type { FollowedChanges } from '../changes/change-follower.js';
import { CapacityError, RateLimitError } from '../foundation/errors.js';
import { Metrics } from '../observability/metrics.js';
import type { ChangeWaits, Holder, WaitOutcome } from './change-waits.js';

/** What the held requests follow: this instance's follower of the change log (D26). */
export interface FollowedLog {
  onChange(listener: (followed: FollowedChanges) => void): () => void;
  /** The position of the log up to which every change has been told to the listeners. */
  readonly toldUpTo: number | undefined;
}

export interface HeldRequestsOptions {
  /** Requests held at once (`PLAYBOOK_SYNC_MAX_WAITERS`); one more is refused with 503. */
  readonly maxHeld: number;
  /** Requests one credential holds at once (`PLAYBOOK_SYNC_MAX_WAITERS_PER_KEY`); one more is refused with 429. */
  readonly maxPerCredential: number;
  /** Requests one account holds at once, whichever of its credentials hold them; `accountShare(maxHeld)` by default. */
  readonly maxPerAccount?: number;
  /** What a refused request is told to wait before it asks again, in seconds. */
  readonly retryAfterSeconds?: number;
  /** Where refusals are counted (D25). */
  readonly metrics?: Metrics;
}

/**
 * The requests one account may hold on an instance: a tenth of the instance's room, and never fewer
 * than 20. Filling an instance takes ten accounts at least, and on a small instance an account still
 * holds as many as one credential does by default.
 */
export function accountShare(maxHeld: number): number {
  return Math.max(20, Math.floor(maxHeld / 10));
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
 *
 * The room is shared (D27): one credential holds at most `maxPerCredential` requests, one account at
 * most `maxPerAccount`, whichever of its credentials hold them, and the instance at most `maxHeld`.
 * A request past its credential's or its account's share is refused at once (429), so that no one
 * takes the room another account's requests need; past the instance's, 503. A request's place in
 * each count is given back with its one outcome, whatever it is.
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
  /** Requests held now by each credential and each account that holds any; none is kept at zero. */
  private readonly byCredential = new Map<string, number>();
  private readonly byAccount = new Map<string, number>();
  private readonly maxPerAccount: number;
  private readonly refusals: Record<'credential' | 'account' | 'instance', () => void>;
  private draining = false;
  private readonly unfollow: () => void;

  constructor(
    private readonly log: FollowedLog,
    private readonly options: HeldRequestsOptions,
  ) {
    this.maxPerAccount = options.maxPerAccount ?? accountShare(options.maxHeld);
    const refused = (options.metrics ?? new Metrics()).syncHeldRefusals;
    this.refusals = {
      credential: () => refused.inc({ reason: 'credential' }),
      account: () => refused.inc({ reason: 'account' }),
      instance: () => refused.inc({ reason: 'instance' }),
    };
    this.unfollow = log.onChange((followed) => this.follow(followed));
  }

  /** Requests held now. */
  get count(): number {
    return this.held;
  }

  /** Requests `holder`'s credential and account hold now. */
  heldBy(holder: Holder): { readonly credential: number; readonly account: number } {
    return {
      credential: this.byCredential.get(holder.credential) ?? 0,
      account: this.byAccount.get(holder.account) ?? 0,
    };
  }

  /** Credentials and accounts that hold requests now: none once every request has had its outcome. */
  get holders(): number {
    return this.byCredential.size + this.byAccount.size;
  }

  quietSince(after: number, namespaces: readonly string[]): number | undefined {
    const known = this.known();
    if (!known || after < known.from || after > known.position) return undefined;
    for (const namespace of namespaces) {
      if ((this.lastChange.get(namespace) ?? 0) > after) return undefined;
    }
    return known.position;
  }

  wait(
    namespaces: readonly string[],
    after: number,
    ms: number,
    holder: Holder,
    signal?: AbortSignal,
  ): Promise<WaitOutcome> {
    if (this.draining) return Promise.resolve(DRAINED);
    if (signal?.aborted) return Promise.resolve(ABORTED);
    if (ms <= 0) return Promise.resolve(TIMED_OUT);
    // Something may have been told between the caller's read and now.
    const known = this.known();
    if (!known || after < known.from) return Promise.resolve({ kind: 'changed', position: undefined });
    if (namespaces.some((namespace) => (this.lastChange.get(namespace) ?? 0) > after)) {
      return Promise.resolve({ kind: 'changed', position: known.position });
    }
    this.admit(holder);
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
          giveBack(this.byCredential, holder.credential);
          giveBack(this.byAccount, holder.account);
          resolve(outcome);
          // Settled once: a second call (a change and the timer at once) does nothing.
          waiter.settle = () => {};
        },
      };
      this.held++;
      take(this.byCredential, holder.credential);
      take(this.byAccount, holder.account);
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

  /**
   * Refuses a request that would go past its credential's share (429), its account's (429) or the
   * instance's room (503), in that order: a caller past its own share is told so, whatever the room.
   */
  private admit(holder: Holder): void {
    const retryAfterSeconds = this.options.retryAfterSeconds ?? 2;
    const { credential, account } = this.heldBy(holder);
    if (credential >= this.options.maxPerCredential) {
      this.refusals.credential();
      throw new RateLimitError(
        `This credential already holds ${this.options.maxPerCredential} sync requests waiting on this instance, as many as one credential may; ask again after Retry-After, or without wait, or hold fewer at once.`,
        retryAfterSeconds,
      );
    }
    if (account >= this.maxPerAccount) {
      this.refusals.account();
      throw new RateLimitError(
        `This account already holds ${this.maxPerAccount} sync requests waiting on this instance, as many as one account may, whichever of its credentials hold them; ask again after Retry-After, or without wait, or hold fewer at once.`,
        retryAfterSeconds,
      );
    }
    if (this.held >= this.options.maxHeld) {
      this.refusals.instance();
      throw new CapacityError(
        'This instance holds as many waiting sync requests as it may; ask again after Retry-After, or without wait.',
        { retryAfterSeconds },
      );
    }
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

function take(counts: Map<string, number>, key: string): void {
  counts.set(key, (counts.get(key) ?? 0) + 1);
}

function giveBack(counts: Map<string, number>, key: string): void {
  const left = (counts.get(key) ?? 0) - 1;
  if (left > 0) counts.set(key, left);
  else counts.delete(key);
}
