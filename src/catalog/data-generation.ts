import type { FastifyBaseLogger } from 'fastify';
import type { Broadcast } from '../broadcast.js';
import type { Db } from '../db/tables.js';

/**
 * Advances the data generation in the caller's transaction. Every write of Catalog data (an import, a
 * publication) calls it in the transaction that makes the write, so that the new number and the new
 * data become visible together, on the primary and on every replica.
 *
 * @example
 * await db.transaction().execute(async (trx) => { await writePlan(trx, plan); await advanceDataGeneration(trx); });
 */
export async function advanceDataGeneration(trx: Db): Promise<void> {
  await trx
    .updateTable('data_generation')
    .set((eb) => ({ generation: eb('generation', '+', 1) }))
    .where('id', '=', 1)
    .execute();
}

/** The data generation as `db` (or a transaction) sees it now. */
export async function readDataGeneration(db: Db): Promise<number> {
  const row = await db
    .selectFrom('data_generation')
    .select('generation')
    .where('id', '=', 1)
    .executeTakeFirstOrThrow();
  return Number(row.generation);
}

/** The longest an instance goes without asking the database whether the data changed. */
export const DEFAULT_POLL_MS = 500;

export interface DataGenerationOptions {
  /** Another process's writes, announced at once (Redis when configured). */
  readonly changes?: Broadcast;
  readonly logger?: FastifyBaseLogger;
  readonly pollMs?: number;
}

/**
 * Follows the data generation of the database that reads go to, and tells its listeners when it
 * moves: that is when answers kept in memory (see answer-cache.ts) stop being right.
 *
 * The generation is read from the reader database every `pollMs`, so that a write made by any process
 * (another instance, `playbook import`) shows here within that time, with or without Redis. A message
 * on `changes` makes it show at once: it makes this instance read the generation now rather than
 * trust the message, because a replica that has not yet applied the write must not be read as if it
 * had (answers made from it would be kept as new); the next poll then catches the replica up.
 */
export class DataGeneration {
  private readonly listeners = new Set<() => void>();
  private readonly pollMs: number;
  private current: number | undefined;
  private timer: NodeJS.Timeout | undefined;
  private unsubscribe: (() => void) | undefined;
  private running: Promise<void> | undefined;
  private again = false;
  private failing = false;

  constructor(
    private readonly db: Db,
    private readonly options: DataGenerationOptions = {},
  ) {
    this.pollMs = options.pollMs ?? DEFAULT_POLL_MS;
  }

  /** Calls `listener` each time the generation moves; returns the way to stop. */
  onChange(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Reads the generation, then keeps following it until `stop()`. */
  async start(): Promise<void> {
    if (this.timer) return;
    this.timer = setInterval(() => void this.check(), this.pollMs);
    // Following the data must not keep a finished command (or a test) alive.
    this.timer.unref();
    this.unsubscribe = this.options.changes?.subscribe(() => void this.check());
    await this.check();
  }

  /**
   * Reads the generation now and tells the listeners if it moved. Calls that come while a read runs
   * are served by one more read after it, never by the read that began before them.
   */
  check(): Promise<void> {
    if (this.running) {
      this.again = true;
      return this.running;
    }
    this.running = (async () => {
      do {
        this.again = false;
        await this.readOnce();
      } while (this.again);
    })().finally(() => {
      this.running = undefined;
    });
    return this.running;
  }

  /**
   * After a write of this process has committed: the listeners here learn of it at once, and other
   * instances through `changes`.
   */
  async announce(): Promise<void> {
    await this.check();
    if (this.current !== undefined) await this.options.changes?.publish(String(this.current));
  }

  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
    this.unsubscribe?.();
    this.unsubscribe = undefined;
  }

  private async readOnce(): Promise<void> {
    let generation: number;
    try {
      generation = await readDataGeneration(this.db);
    } catch (error) {
      // Reads fail the same way meanwhile (503); the answers kept stay as they were, and the next
      // successful read compares with the last generation seen.
      if (!this.failing) {
        this.failing = true;
        this.options.logger?.warn({ err: error }, 'cannot read the data generation; will retry');
      }
      return;
    }
    if (this.failing) {
      this.failing = false;
      this.options.logger?.info('reading the data generation again');
    }
    const previous = this.current;
    this.current = generation;
    if (previous !== undefined && previous !== generation) {
      for (const listener of this.listeners) listener();
    }
  }
}
