import type { FastifyBaseLogger } from 'fastify';
import { sql } from 'kysely';
import { type Db, dialectOf } from '../db/tables.js';
import { WriteContentionError } from '../foundation/errors.js';
import { nextTurn } from '../foundation/pace.js';
import { Metrics } from '../observability/metrics.js';
import {
  appendChanges,
  type ChangeActor,
  type ChangeContext,
  type ChangeType,
  type NewChange,
} from './change-log.js';
import { forgetStoredDetails } from './forget-details.js';

/** The writes of the service, as the metrics and the logs name them. */
export type WriteName =
  | 'import'
  | 'publish-catalog'
  | 'publish-resource'
  | 'publish-version'
  | 'archive'
  | 'key-create'
  | 'key-roll'
  | 'key-revoke'
  | 'key-update'
  /** D32: an `api_key.expiring` change, made by the service. */
  | 'key-expiry-notice'
  | 'account-set'
  | 'webhook-endpoint'
  /** Rows of the read model of details (D30), written by the service itself. */
  | 'store-details';

/** What a write works with inside its transaction. */
export interface WriteScope {
  /** The transaction: every statement of the write goes through it. */
  readonly db: Db;
  /** When the write happens, who makes it, and for which request: stamped on its changes. */
  readonly context: ChangeContext;
  /** Appends changes to the log now, in this transaction (a large write appends a batch at a time). */
  append(changes: readonly NewChange[]): Promise<void>;
}

/** Changes a write has just appended, in its transaction: their `seq` run from `firstSeq` to `lastSeq`. */
export interface AppendedChanges {
  readonly firstSeq: number;
  readonly lastSeq: number;
  readonly changes: readonly NewChange[];
  readonly context: ChangeContext;
}

/**
 * What else must be written with changes, in the same transaction, after each append (an outbox: the
 * webhook deliveries they make due). A failure fails the write, so there is nothing of one without
 * the other.
 */
export type AppendHook = (trx: Db, appended: AppendedChanges) => Promise<void>;

/**
 * What else must be written once a write's work is done, in its transaction, just before its commit:
 * what the append hooks gathered over the whole write. A row locked here is held for the commit
 * only, not for the whole of a long write (a write of 100,000 Resources is seconds of it). A failure
 * fails the write.
 */
export type CommitHook = (trx: Db) => Promise<void>;

/** Who asks for a write. */
export interface Writer {
  readonly actor: ChangeActor;
  readonly requestId?: string | undefined;
  /** When the write happens, if the writer has decided it (an import stamps its rows); now by default. */
  readonly at?: string;
}

export interface UnitOfWorkOptions {
  /** Told after each commit that appended changes: this instance's follower, which tells the others. */
  readonly announce?: () => Promise<void>;
  /** Transactions tried before a write gives up with 503. */
  readonly attempts?: number;
  /** The first retry's largest delay; each later one doubles it (full jitter). */
  readonly backoffMs?: number;
  readonly logger?: FastifyBaseLogger;
  readonly now?: () => string;
  /** Runs once a write's changes are appended, just before its commit: where a test makes one fail. */
  readonly beforeCommit?: (write: WriteName) => void | Promise<void>;
  /**
   * How long one attempt waits for the writers' turn held by another process (PostgreSQL's lock
   * timeout) before it counts as a conflict and is tried again.
   */
  readonly turnWaitMs?: number;
  /** How long a write waits behind this process's earlier writes before it gives up with 503. */
  readonly queueWaitMs?: number;
  /** Where transactions and changes are counted (D25). */
  readonly metrics?: Metrics;
  /** Writes made with every append, in its transaction (see `AppendHook`). */
  readonly afterAppend?: readonly AppendHook[];
  /** Writes made at the end of every write, in its transaction (see `CommitHook`). */
  readonly beforeCommitting?: readonly CommitHook[];
}

const DEFAULT_ATTEMPTS = 6;
const DEFAULT_BACKOFF_MS = 20;
/** Below the statement timeout (5 s), so that a wait for the turn is a conflict, not an outage. */
const DEFAULT_TURN_WAIT_MS = 2000;
const DEFAULT_QUEUE_WAIT_MS = 30_000;

/**
 * The one way a write reaches the database. It owns the transaction and its retries, appends the
 * write's changes to the log in that transaction, tells the follower after the commit, and records
 * the metrics. A caller answers only after `run` returns, that is after the commit.
 *
 * Each append also deletes the stored details of what its changes name (D30, forget-details.ts), so
 * that no write road can leave one showing what it changed.
 *
 * Writers take turns. A write's first statement claims the log's head row (see `claimHead`), which
 * PostgreSQL holds locked and SQLite holds as its one writer until the commit; every statement after
 * it sees what every earlier write committed, and the write's changes take the next numbers of the log,
 * so the log's order is the commit order (no change commits behind one a reader has seen). Within this
 * process writes wait their turn in memory rather than on a pooled connection, so that writes queued
 * behind a long import never hold the connections reads need.
 *
 * `work` may run more than once: what is left to conflict (a busy SQLite file shared with another
 * process, a deadlock with a statement outside the unit of work) rolls everything back, and `work`
 * runs again on what is then stored, after a jittered, growing delay. When every attempt failed so,
 * the write fails with `WriteContentionError` (503 with `Retry-After`), never as an internal error.
 * A `work` must not start another write: it would wait for its own turn.
 *
 * @example
 * await writes.run('archive', { actor }, async (write) => {
 *   await write.db.updateTable('catalogs').set({ status: 'archived' }).where('id', '=', id).execute();
 *   await write.append([{ namespace, type: 'catalog.archived', target, summary }]);
 * });
 */
export class UnitOfWork {
  private readonly attempts: number;
  private readonly backoffMs: number;
  private readonly now: () => string;
  private readonly turnWaitMs: number;
  private readonly queueWaitMs: number;
  private readonly metrics: Metrics;
  /** Settles once every write queued so far in this process has. */
  private last: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly db: Db,
    private readonly options: UnitOfWorkOptions = {},
  ) {
    this.attempts = options.attempts ?? DEFAULT_ATTEMPTS;
    this.backoffMs = options.backoffMs ?? DEFAULT_BACKOFF_MS;
    this.now = options.now ?? (() => new Date().toISOString());
    this.turnWaitMs = options.turnWaitMs ?? DEFAULT_TURN_WAIT_MS;
    this.queueWaitMs = options.queueWaitMs ?? DEFAULT_QUEUE_WAIT_MS;
    this.metrics = options.metrics ?? new Metrics();
  }

  async run<T>(
    write: WriteName,
    writer: Writer,
    work: (scope: WriteScope) => Promise<T>,
    /** Told before each new attempt, with its number (an import says so on its progress lines). */
    onRetry?: (attempt: number) => void,
  ): Promise<T> {
    const before = this.last;
    const turn = this.waitForTurn(before, write).then(() => this.attempt(write, writer, work, onRetry));
    // The next write waits for this one and for every one before it (this one may give up waiting).
    this.last = Promise.allSettled([before, turn]);
    // The next write's turn starts at this one's commit, not after it is announced.
    const { value, appended } = await turn;
    if (appended.size > 0) await this.committed(appended);
    return value;
  }

  /** Waits for the writes queued before, at most `queueWaitMs`: then 503, with nothing written. */
  private async waitForTurn(before: Promise<unknown>, write: WriteName): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<'late'>((resolve) => {
      timer = setTimeout(() => resolve('late'), this.queueWaitMs);
    });
    try {
      if ((await Promise.race([before.then(() => 'turn' as const), late])) === 'late') {
        this.metrics.writeTransactions.inc({ write, outcome: 'busy' });
        throw new WriteContentionError(
          'Earlier writes of this instance are still running; nothing was written. Retry after the time in Retry-After.',
        );
      }
    } finally {
      clearTimeout(timer);
    }
  }

  private async attempt<T>(
    write: WriteName,
    writer: Writer,
    work: (scope: WriteScope) => Promise<T>,
    onRetry: ((attempt: number) => void) | undefined,
  ): Promise<{ value: T; appended: ReadonlyMap<ChangeType, number> }> {
    const context: ChangeContext = {
      at: writer.at ?? this.now(),
      actor: writer.actor,
      requestId: writer.requestId,
    };
    for (let attempt = 1; ; attempt++) {
      // Counted by type, not held: a write of 100,000 Resources appends as many changes.
      const appended = new Map<ChangeType, number>();
      try {
        const result = await this.db.transaction().execute(async (trx) => {
          await claimHead(trx, this.turnWaitMs);
          const scope: WriteScope = {
            db: trx,
            context,
            append: async (changes) => {
              if (changes.length === 0) return;
              const lastSeq = await appendChanges(trx, context, changes);
              await forgetStoredDetails(trx, changes);
              const appendedNow = { firstSeq: lastSeq - changes.length + 1, lastSeq, changes, context };
              for (const hook of this.options.afterAppend ?? []) await hook(trx, appendedNow);
              for (const { type } of changes) appended.set(type, (appended.get(type) ?? 0) + 1);
            },
          };
          const value = await work(scope);
          for (const hook of this.options.beforeCommitting ?? []) await hook(trx);
          await this.options.beforeCommit?.(write);
          // SQLite's driver commits on this thread, and a large write's commit is tens of
          // milliseconds: it starts a turn of its own, after the requests waiting now.
          await nextTurn();
          return value;
        });
        this.metrics.writeTransactions.inc({ write, outcome: 'committed' });
        return { value: result, appended };
      } catch (error) {
        if (!isWriteConflict(error)) {
          this.metrics.writeTransactions.inc({ write, outcome: 'failed' });
          throw error;
        }
        if (attempt >= this.attempts) {
          this.metrics.writeTransactions.inc({ write, outcome: 'busy' });
          this.options.logger?.warn(
            { write, attempts: attempt },
            'a write met concurrent writes on every attempt; answered 503',
          );
          throw new WriteContentionError(
            'Other writes to the same data got in first on every attempt; nothing was written. Retry after the time in Retry-After.',
          );
        }
        this.metrics.writeTransactions.inc({ write, outcome: 'conflict' });
        onRetry?.(attempt + 1);
        // The writer that got in first needs time to finish; full jitter spreads those who retry.
        await new Promise((resolve) => setTimeout(resolve, Math.random() * this.backoffMs * 2 ** attempt));
      }
    }
  }

  private async committed(appended: ReadonlyMap<ChangeType, number>): Promise<void> {
    for (const [type, count] of appended) this.metrics.changesAppended.inc({ type }, count);
    try {
      await this.options.announce?.();
    } catch (error) {
      // Committed is committed: every instance, this one included, still reads the log within its poll.
      this.options.logger?.warn(
        { err: error },
        'a committed write could not be announced; the poll will carry it',
      );
    }
  }
}

/**
 * Takes the writers' turn: a write of the head row that changes nothing. PostgreSQL locks the row until
 * the commit (a writer that comes meanwhile waits here, then reads what this one committed); SQLite
 * takes its write lock, and a deferred transaction's snapshot starts with it.
 */
async function claimHead(trx: Db, waitMs: number): Promise<void> {
  if (dialectOf(trx) === 'postgres') {
    // Waiting longer is a conflict (55P03), tried again after a pause, rather than the statement
    // timeout, which reads as an outage.
    await sql`select set_config('lock_timeout', ${`${waitMs}ms`}, true)`.execute(trx);
  }
  await trx
    .updateTable('data_generation')
    .set((eb) => ({ generation: eb.ref('generation') }))
    .where('id', '=', 1)
    .execute();
}

/**
 * A conflict with a concurrent writer that a fresh attempt resolves: SQLite's busy database or stale
 * read snapshot, PostgreSQL's serialization failure, deadlock, or a wait for a lock that timed out.
 */
export function isWriteConflict(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return ['SQLITE_BUSY', 'SQLITE_BUSY_SNAPSHOT', '40001', '40P01', '55P03'].includes(String(code));
}
