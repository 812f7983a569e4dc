import type { FastifyBaseLogger } from 'fastify';
import type { Db } from '../db/tables.js';
import { UnavailableError } from '../foundation/errors.js';
import { type LastUse, recordLastUsed } from './api-key-repository.js';
import { addUsage, OUTCOMES, pruneUsage, type UsageRow } from './usage-repository.js';

/** Keys per statement: well under SQLite's and PostgreSQL's bound-parameter limits (3 per key). */
const BATCH_SIZE = 500;
const HOUR_MS = 3_600_000;
/** D32: how long usage is kept, and how often what is older is deleted. */
export const USAGE_KEPT_DAYS = 90;
const PRUNE_EVERY_MS = HOUR_MS;

/**
 * Where answers of requests made with a key are counted (D32): the auth hook tells each one, once it
 * is sent, and each refusal of a key id that exists.
 */
export interface KeyUsage {
  /**
   * Counts an answer of `status` to a request made with the key `keyId`. `address` is the request's
   * client address when the key's secret held: the key's last use, then.
   */
  count(keyId: string, status: number, address?: string): void;
}

/** The outcome an answer is counted as: 401 and 403 are refusals of the key, 429 of its rate. */
export function outcomeOf(status: number): number {
  if (status < 400) return SUCCESS;
  if (status === 401 || status === 403) return UNAUTHORIZED;
  if (status === 429) return RATE_LIMITED;
  return status < 500 ? CLIENT_ERROR : SERVER_ERROR;
}

const SUCCESS = OUTCOMES.indexOf('success');
const CLIENT_ERROR = OUTCOMES.indexOf('clientError');
const UNAUTHORIZED = OUTCOMES.indexOf('unauthorized');
const RATE_LIMITED = OUTCOMES.indexOf('rateLimited');
const SERVER_ERROR = OUTCOMES.indexOf('serverError');

/** What one key did since the last flush. */
interface Tally {
  /** Its last use, in milliseconds since the epoch, and the address it came from when known. */
  lastAt: number | undefined;
  address: string | undefined;
  /** The hour counted now, by `Math.floor(ms / HOUR_MS)`, and its counts by outcome. */
  hour: number;
  counts: number[] | undefined;
  /** Hours counted before the current one, when an interval spans the turn of an hour. */
  earlier: Map<number, number[]> | undefined;
}

export interface UsageRecorderOptions {
  /** How often what was gathered is written: at most once a minute (D32). */
  readonly intervalMs?: number;
  /** Milliseconds since the epoch (tests move it). */
  readonly now?: () => number;
}

/**
 * How keys are used, without a write per request (D8, D32): the last use of each key (its time and
 * client address) and its answers counted by hour and outcome are gathered in memory and written in
 * batched statements every `intervalMs` (a minute), and once more on `close()`, which a graceful stop
 * calls. A crash loses at most one interval. Counts are added to what is stored, so that every
 * instance's add up in one row; usage older than 90 days is deleted as it ages.
 */
export class UsageRecorder implements KeyUsage {
  private tallies = new Map<string, Tally>();
  private readonly timer: NodeJS.Timeout;
  private flushing: Promise<void> = Promise.resolve();
  private readonly now: () => number;
  private prunedAt = Number.NEGATIVE_INFINITY;

  constructor(
    private readonly db: Db,
    private readonly logger: FastifyBaseLogger,
    options: UsageRecorderOptions = {},
  ) {
    this.now = options.now ?? Date.now;
    this.timer = setInterval(() => void this.flush(), options.intervalMs ?? 60_000);
    // A pending flush must not keep a finished command (or a test) alive.
    this.timer.unref();
  }

  /** Notes a use at `atMs` (a verified key); cheap enough for every request. */
  record(keyId: string, atMs: number): void {
    const tally = this.tallyOf(keyId);
    if (tally.lastAt === undefined || tally.lastAt < atMs) tally.lastAt = atMs;
  }

  count(keyId: string, status: number, address?: string): void {
    const tally = this.tallyOf(keyId);
    const now = this.now();
    const hour = Math.floor(now / HOUR_MS);
    if (tally.hour !== hour) {
      // The hour turned: the one counted so far joins the earlier ones.
      if (tally.counts) {
        tally.earlier ??= new Map();
        tally.earlier.set(tally.hour, tally.counts);
      }
      tally.hour = hour;
      tally.counts = tally.earlier?.get(hour);
    }
    hourCounts(tally, hour)[outcomeOf(status)]!++;
    if (address !== undefined) {
      if (tally.lastAt === undefined || tally.lastAt <= now) tally.lastAt = now;
      tally.address = address;
    }
  }

  /** The latest use of a key not yet written, if any. */
  pending(keyId: string): string | undefined {
    const at = this.tallies.get(keyId)?.lastAt;
    return at === undefined ? undefined : new Date(at).toISOString();
  }

  /** The latest use of a key not yet written, with its address when known. */
  pendingUse(keyId: string): LastUse | undefined {
    const tally = this.tallies.get(keyId);
    if (tally?.lastAt === undefined) return undefined;
    return { at: new Date(tally.lastAt).toISOString(), address: tally.address ?? null };
  }

  /** The counts of a key not yet written, by hour. */
  pendingCounts(keyId: string): UsageRow[] {
    const tally = this.tallies.get(keyId);
    return tally ? rowsOf(keyId, tally) : [];
  }

  /** Writes what was gathered. Flushes never overlap; a failed batch is added back for the next one. */
  flush(): Promise<void> {
    this.flushing = this.flushing.then(() => this.write());
    return this.flushing;
  }

  private tallyOf(keyId: string): Tally {
    let tally = this.tallies.get(keyId);
    if (!tally) {
      tally = { lastAt: undefined, address: undefined, hour: 0, counts: undefined, earlier: undefined };
      this.tallies.set(keyId, tally);
    }
    return tally;
  }

  private async write(): Promise<void> {
    await this.prune();
    if (this.tallies.size === 0) return;
    const batch = this.tallies;
    this.tallies = new Map();
    const entries = [...batch];
    for (let start = 0; start < entries.length; start += BATCH_SIZE) {
      const slice = entries.slice(start, start + BATCH_SIZE);
      const uses = new Map<string, LastUse>();
      for (const [keyId, tally] of slice) {
        if (tally.lastAt !== undefined) {
          uses.set(keyId, { at: new Date(tally.lastAt).toISOString(), address: tally.address ?? null });
        }
      }
      try {
        await recordLastUsed(this.db, uses);
        await addUsage(
          this.db,
          slice.flatMap(([keyId, tally]) => rowsOf(keyId, tally)),
        );
      } catch (error) {
        // Written again with the next flush: a time is kept if later, counts are added back. The
        // last uses may be written twice, which changes nothing.
        for (const [keyId, tally] of slice) this.mergeBack(keyId, tally);
        // An outage of the database is said once by its health (D31), not by every flush meanwhile.
        if (!(error instanceof UnavailableError)) {
          this.logger.warn({ err: error, keys: slice.length }, 'could not record API key usage; will retry');
        }
      }
    }
  }

  /** What a failed flush held, added to what was gathered since. */
  private mergeBack(keyId: string, failed: Tally): void {
    const tally = this.tallyOf(keyId);
    if (failed.lastAt !== undefined && (tally.lastAt === undefined || tally.lastAt < failed.lastAt)) {
      tally.lastAt = failed.lastAt;
      tally.address = failed.address ?? tally.address;
    }
    for (const row of rowsOf(keyId, failed)) {
      const counts = hourCounts(tally, Date.parse(row.start) / HOUR_MS);
      row.counts.forEach((count, index) => {
        counts[index]! += count;
      });
    }
  }

  /** Deletes usage past what is kept, at most once an hour. */
  private async prune(): Promise<void> {
    const now = this.now();
    if (now - this.prunedAt < PRUNE_EVERY_MS) return;
    try {
      // A day's margin: the first bucket of a range that starts 90 days back begins before it.
      await pruneUsage(this.db, new Date(now - (USAGE_KEPT_DAYS + 1) * 24 * HOUR_MS).toISOString());
      this.prunedAt = now;
    } catch (error) {
      if (!(error instanceof UnavailableError)) {
        this.logger.warn({ err: error }, 'could not delete old API key usage; will retry');
      }
    }
  }

  /** Stops the timer and writes what is left. */
  async close(): Promise<void> {
    clearInterval(this.timer);
    await this.flush();
  }
}

/** The counts of one hour of a tally, made when it has none. */
function hourCounts(tally: Tally, hour: number): number[] {
  if (hour === tally.hour) {
    tally.counts ??= [0, 0, 0, 0, 0];
    return tally.counts;
  }
  tally.earlier ??= new Map();
  let counts = tally.earlier.get(hour);
  if (!counts) {
    counts = [0, 0, 0, 0, 0];
    tally.earlier.set(hour, counts);
  }
  return counts;
}

/** A tally's hours as rows, by hour. */
function rowsOf(keyId: string, tally: Tally): UsageRow[] {
  const hours = new Map(tally.earlier);
  if (tally.counts) hours.set(tally.hour, tally.counts);
  return [...hours]
    .sort(([a], [b]) => a - b)
    .map(([hour, counts]) => ({ keyId, start: new Date(hour * HOUR_MS).toISOString(), counts: [...counts] }));
}
