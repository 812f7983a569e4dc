import type { FastifyBaseLogger } from 'fastify';
import type { Db } from '../db/tables.js';
import type { Broadcast } from '../foundation/broadcast.js';
import { UnavailableError } from '../foundation/errors.js';
import { Metrics } from '../observability/metrics.js';
import { type Change, readChangesAfter, readHead } from './change-log.js';

/** The longest an instance goes without asking the database whether the log moved. */
export const DEFAULT_POLL_MS = 500;

/** Changes read per query while catching up. */
const PAGE = 1000;
/** Beyond this many changes behind, a follower stops reading them one by one and starts afresh. */
const MAX_CAUGHT_UP = 10_000;

/** What a follower learned in one step. */
export interface FollowedChanges {
  /** The changes since the last step, in order; empty when `startAfresh`. */
  readonly changes: readonly Change[];
  /**
   * True when this step could not list what changed (the log moved further than a follower reads
   * change by change, or moved without changes a follower can read, or back): everything held may be
   * stale.
   */
  readonly startAfresh: boolean;
  /** The `seq` followed up to. */
  readonly seq: number;
}

export interface ChangeFollowerOptions {
  /** Another process's commits, announced at once (Redis when configured). */
  readonly changes?: Broadcast;
  readonly logger?: FastifyBaseLogger;
  readonly pollMs?: number;
  /** Where the position followed is reported (D25). */
  readonly metrics?: Metrics;
}

/**
 * Follows the change log of the database that reads go to, and tells its listeners what changed,
 * once, in order: the answers kept in memory drop what a change touched (see answer-cache.ts).
 *
 * The log's head is read every `pollMs`, so that a write made by any process (another instance, a
 * `playbook import` on the same SQLite file) shows here within that time, with or without Redis. A
 * message on `changes` makes it show at once: it makes this follower read the log now rather than
 * trust the message, because a replica that has not yet applied the write must not be read as if it
 * had (answers made from it would be kept as new); the next poll then catches the replica up.
 */
export class ChangeFollower {
  private readonly listeners = new Set<(followed: FollowedChanges) => void>();
  private readonly pollMs: number;
  private readonly metrics: Metrics;
  private position: number | undefined;
  /** The position every listener has been told up to (the first read's, before anything moved). */
  private told: number | undefined;
  private timer: NodeJS.Timeout | undefined;
  private unsubscribe: (() => void) | undefined;
  private running: Promise<void> | undefined;
  private again = false;
  private failing = false;
  /** Whether this run of failures said so: one that is no outage of the database is said once. */
  private saidFailing = false;

  constructor(
    private readonly db: Db,
    private readonly options: ChangeFollowerOptions = {},
  ) {
    this.pollMs = options.pollMs ?? DEFAULT_POLL_MS;
    this.metrics = options.metrics ?? new Metrics();
  }

  /**
   * Whether the last read of the log succeeded: what is held in memory is as fresh as the log. False
   * from a failed read until the next one succeeds (D31).
   */
  get current(): boolean {
    return !this.failing;
  }

  /**
   * The log's position up to which every change has been told to the listeners: what a listener that
   * has been told nothing yet may take as its start (D27's held requests).
   */
  get toldUpTo(): number | undefined {
    return this.told;
  }

  /** Calls `listener` each time the log moves; returns the way to stop. */
  onChange(listener: (followed: FollowedChanges) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Reads the head, then keeps following the log until `stop()`. */
  async start(): Promise<void> {
    if (this.timer) return;
    this.timer = setInterval(() => void this.check(), this.pollMs);
    // Following the log must not keep a finished command (or a test) alive.
    this.timer.unref();
    this.unsubscribe = this.options.changes?.subscribe(() => void this.check());
    await this.check();
  }

  /**
   * Reads the log now and tells the listeners what moved. Calls that come while a read runs are
   * served by one more read after it, never by the read that began before them.
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
    if (this.position !== undefined) await this.options.changes?.publish(String(this.position));
  }

  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
    this.unsubscribe?.();
    this.unsubscribe = undefined;
  }

  private async readOnce(): Promise<void> {
    let followed: FollowedChanges | undefined;
    try {
      followed = await this.step();
    } catch (error) {
      // What is held stays as it was, and the next read that succeeds carries on from the last
      // position followed. An outage of the database is said once by its health (D31); anything else
      // is said here, once a run, however the run began.
      if (!this.saidFailing && !(error instanceof UnavailableError)) {
        this.saidFailing = true;
        this.options.logger?.warn({ err: error }, 'cannot read the change log; will retry');
      }
      this.failing = true;
      return;
    }
    if (this.saidFailing) this.options.logger?.info('reading the change log again');
    this.saidFailing = false;
    this.failing = false;
    if (!followed) {
      this.told ??= this.position;
      return;
    }
    this.metrics.changeLogPosition.set(followed.seq);
    for (const listener of this.listeners) listener(followed);
    this.told = followed.seq;
  }

  /**
   * What changed since the last step; undefined when nothing did (or on the first step). The position
   * moves only once what changed has been read: a read that fails is made again by the next step.
   */
  private async step(): Promise<FollowedChanges | undefined> {
    const head = await readHead(this.db);
    const from = this.position;
    if (from === undefined || head === from) {
      this.position = head;
      return undefined;
    }
    if (head < from || head - from > MAX_CAUGHT_UP) {
      this.position = head;
      return { changes: [], startAfresh: true, seq: head };
    }
    const changes: Change[] = [];
    while (changes.length < head - from) {
      const page = await readChangesAfter(this.db, changes.at(-1)?.seq ?? from, PAGE);
      const within = page.filter((change) => change.seq <= head);
      changes.push(...within);
      if (page.length < PAGE || within.length < page.length) break;
    }
    this.position = head;
    // Every number up to the head belongs to a change that committed with it: a missing one is a
    // write that moved the head without the log (an older process), and says nothing of what changed.
    if (changes.length !== head - from) return { changes: [], startAfresh: true, seq: head };
    return { changes, startAfresh: false, seq: head };
  }
}
