/** What the trust in memory is told by: the follower of the change log, and the database's health. */
export interface TrustSources {
  /** Whether the follower's last read of the change log succeeded. */
  readonly follower: { readonly current: boolean };
  /** Whether the database answers, as its uses find it, and when that changes. */
  readonly database: { readonly isUp: boolean; onChange(listener: (up: boolean) => void): () => void };
}

/**
 * Whether what an instance holds in memory (answers, verified credentials, plans) may be served now
 * (D31). Every change is a database write that the change log records (D26), so:
 * - while the follower is current, memory is as fresh as the log has been followed;
 * - while the database does not answer, nothing can change: memory is served through the outage;
 * - once the database answers again but before the follower has caught up with the log, memory may
 *   miss changes another instance made meanwhile: it is not served until the follower has read them.
 */
export class MemoryTrust {
  /**
   * Set when the database was seen answering while the follower was behind, until the follower next
   * reads the log: another failure meanwhile (a busy pool, a timeout) is no outage to serve memory
   * through, for memory may already miss what changed.
   */
  private catchingUp = false;
  private readonly unwatch: () => void;

  constructor(private readonly sources: TrustSources) {
    this.unwatch = sources.database.onChange((up) => {
      if (up && !sources.follower.current) this.catchingUp = true;
    });
  }

  /** Memory may be served. */
  get trusted(): boolean {
    if (this.sources.follower.current) {
      this.catchingUp = false;
      return true;
    }
    return this.outage;
  }

  /** The database is known not to answer: what only it can say is not asked, and memory is served. */
  get outage(): boolean {
    if (this.sources.follower.current) this.catchingUp = false;
    return !this.sources.database.isUp && !this.catchingUp;
  }

  close(): void {
    this.unwatch();
  }
}

/** Memory always served, storage always asked when it must be: parts composed without a follower. */
export const ALWAYS_TRUSTED = { trusted: true, outage: false } as const;

/** What a part that serves from memory asks of the trust. */
export type Trust = Pick<MemoryTrust, 'trusted' | 'outage'>;
