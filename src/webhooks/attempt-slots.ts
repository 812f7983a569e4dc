import { growingCache } from '../foundation/growing-cache.js';

/**
 * An instance's attempts in flight (D28): the slots they hold, by endpoint and by account, what a
 * claim needs to share the free ones fairly (claim.ts), and which endpoints answer quickly.
 *
 * An attempt that succeeded within `quickMs`, with none of its endpoint's still waiting longer, lets
 * the endpoint take any free slot; until then, and from the moment one of its attempts fails or takes
 * longer, it has its share (`perEndpoint`). A slow or failing endpoint thus holds its share of the
 * slots, never all of them, and a quick one is not held to a share that its answers' time would make
 * a bottleneck.
 */

/** Endpoints remembered as quick to answer; one forgotten is held to its share until it answers again. */
const QUICK_ENDPOINTS_KEPT = 10_000;
/** Accounts whose last turn is remembered; one forgotten goes first, as one never served. */
const ACCOUNTS_KEPT = 10_000;

export class AttemptSlots {
  /** Requests in flight, in all. */
  private requests = 0;
  /** When each request in flight to an endpoint started. */
  private readonly byEndpoint = new Map<string, number[]>();
  private readonly byAccount = new Map<string, number>();
  private readonly quick = growingCache<string, true>(QUICK_ENDPOINTS_KEPT);
  /** When each account was last given a slot, as a rising count. */
  private readonly served = growingCache<string, number>(ACCOUNTS_KEPT);
  private serving = 0;

  constructor(
    private readonly concurrency: number,
    private readonly quickMs: number,
  ) {}

  /** Slots not held by a request in flight. */
  get free(): number {
    return this.concurrency - this.requests;
  }

  /** Attempts in flight, by endpoint. */
  inFlight(): Map<string, number> {
    return new Map([...this.byEndpoint].map(([endpointId, started]) => [endpointId, started.length]));
  }

  /** Attempts in flight, by account. */
  inFlightByAccount(): ReadonlyMap<string, number> {
    return new Map(this.byAccount);
  }

  /** When an account was last given a slot (0: never, or long ago): the least recent is served first. */
  readonly lastServed = (accountId: string): number => this.served.peek(accountId) ?? 0;

  /** The endpoints that may take any free slot now. */
  answeringQuickly(nowMs: number): Set<string> {
    const quick = new Set<string>();
    for (const endpointId of this.quick.keys()) {
      const started = this.byEndpoint.get(endpointId) ?? [];
      if (started.every((at) => nowMs - at < this.quickMs)) quick.add(endpointId);
    }
    return quick;
  }

  /** Counts a request that starts; returns what ends it, and frees its slot. */
  hold(endpointId: string, accountId: string, startedMs: number): () => void {
    this.requests++;
    const started = this.byEndpoint.get(endpointId) ?? [];
    started.push(startedMs);
    this.byEndpoint.set(endpointId, started);
    this.byAccount.set(accountId, (this.byAccount.get(accountId) ?? 0) + 1);
    this.served.set(accountId, ++this.serving);
    return () => {
      this.requests--;
      started.splice(started.indexOf(startedMs), 1);
      if (started.length === 0) this.byEndpoint.delete(endpointId);
      const held = (this.byAccount.get(accountId) ?? 1) - 1;
      if (held === 0) this.byAccount.delete(accountId);
      else this.byAccount.set(accountId, held);
    };
  }

  /**
   * Only a success answered in time makes an endpoint quick: one that fails, however fast, is held to
   * its share, so that its retries never crowd out the deliveries of the others.
   */
  ended(endpointId: string, ok: boolean, durationMs: number): void {
    if (ok && durationMs < this.quickMs) this.quick.set(endpointId, true);
    else this.quick.delete(endpointId);
  }
}
