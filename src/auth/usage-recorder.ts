import type { FastifyBaseLogger } from 'fastify';
import type { Db } from '../db/tables.js';
import { UnavailableError } from '../foundation/errors.js';
import { recordLastUsed } from './api-key-repository.js';

/** Keys per statement: well under SQLite's and PostgreSQL's bound-parameter limits (3 per key). */
const BATCH_SIZE = 500;

/**
 * `lastUsedAt` without a write per request (D8): uses are collected in memory (the latest time per
 * key) and written in batched statements every `intervalMs`, and once more on `close()`. A crash
 * loses at most one interval of usage times, which is what a "last used" hint can afford.
 */
export class UsageRecorder {
  /** The latest use of each key, in milliseconds since the epoch: turned into text only when written. */
  private uses = new Map<string, number>();
  private readonly timer: NodeJS.Timeout;
  private flushing: Promise<void> = Promise.resolve();

  constructor(
    private readonly db: Db,
    private readonly logger: FastifyBaseLogger,
    intervalMs = 5000,
  ) {
    this.timer = setInterval(() => void this.flush(), intervalMs);
    // A pending flush must not keep a finished command (or a test) alive.
    this.timer.unref();
  }

  /** Notes a use at `atMs`; cheap enough for every request. */
  record(keyId: string, atMs: number): void {
    const previous = this.uses.get(keyId);
    if (previous === undefined || previous < atMs) this.uses.set(keyId, atMs);
  }

  /** The latest use of a key not yet written, if any. */
  pending(keyId: string): string | undefined {
    const at = this.uses.get(keyId);
    return at === undefined ? undefined : new Date(at).toISOString();
  }

  /** Writes what was collected. Flushes never overlap; a failed batch is retried on the next one. */
  flush(): Promise<void> {
    this.flushing = this.flushing.then(() => this.write());
    return this.flushing;
  }

  private async write(): Promise<void> {
    if (this.uses.size === 0) return;
    const batch = this.uses;
    this.uses = new Map();
    const entries = [...batch];
    for (let start = 0; start < entries.length; start += BATCH_SIZE) {
      const chunk = new Map(
        entries.slice(start, start + BATCH_SIZE).map(([keyId, at]) => [keyId, new Date(at).toISOString()]),
      );
      try {
        await recordLastUsed(this.db, chunk);
      } catch (error) {
        for (const [keyId, at] of chunk) this.record(keyId, Date.parse(at));
        // An outage of the database is said once by its health (D31), not by every flush meanwhile.
        if (!(error instanceof UnavailableError)) {
          this.logger.warn({ err: error, keys: chunk.size }, 'could not record API key usage; will retry');
        }
      }
    }
  }

  /** Stops the timer and writes what is left. */
  async close(): Promise<void> {
    clearInterval(this.timer);
    await this.flush();
  }
}
