import { LRUCache } from 'lru-cache';
import { Answer, type ReadAnswer } from '../http/answer.js';
import { answerCacheLookups } from '../observability/metrics.js';
import type { ListPositions } from './read-repository.js';

/** What a lazy answer is counted as: its row and closure, not its body, which it does not hold. */
const LAZY_ANSWER_BYTES = 1024;
/** What a key and an entry cost beyond the answer's bytes. */
const ENTRY_OVERHEAD_BYTES = 128;

interface Entry {
  readonly answer: ReadAnswer;
}

export interface AnswerCacheStats {
  readonly entries: number;
  readonly bytes: number;
  readonly hits: number;
  readonly misses: number;
}

/** The lookups' series of the metrics (D25), bound once. */
const HIT = answerCacheLookups.bind({ result: 'hit' });
const MISS = answerCacheLookups.bind({ result: 'miss' });

/**
 * Answers of the read operations, by a key that names everything that decides their bytes: the
 * operation, its parameters, and whose view it is (see answer-keys.ts, the one key scheme). Bounded by a
 * byte budget (`PLAYBOOK_ANSWER_CACHE_BYTES`), least recently used first out, compressed forms counted
 * as they are made.
 *
 * The data behind every answer changes only by writes that advance the data generation, and
 * `clear()` is called whenever the generation moves (see data-generation.ts). An answer made from
 * reads that began before a `clear()` is never kept: `ticket()` is taken before reading, and `set`
 * refuses a ticket from before the latest clear.
 */
export class AnswerCache {
  private readonly entries: LRUCache<string, Entry> | undefined;
  /** The positions of lists of Resources (see `ListPositions`): small, and kept whatever the budget. */
  private readonly lists = new LRUCache<string, ListPositions>({ max: 1000 });
  private readonly loading = new Map<string, Promise<ReadAnswer>>();
  private epoch = 0;
  private hits = 0;
  private misses = 0;

  /** @param maxBytes the budget; 0 keeps nothing (every read is made afresh). */
  constructor(maxBytes: number) {
    this.entries =
      maxBytes > 0
        ? new LRUCache<string, Entry>({
            maxSize: maxBytes,
            sizeCalculation: (entry, key) => ENTRY_OVERHEAD_BYTES + key.length * 2 + bytesOf(entry.answer),
          })
        : undefined;
  }

  get(key: string): ReadAnswer | undefined {
    const answer = this.entries?.get(key)?.answer;
    if (answer === undefined) {
      this.misses++;
      MISS.inc();
    } else {
      this.hits++;
      HIT.inc();
    }
    return answer;
  }

  /** Taken before reading what an answer is made of, and handed to `set` with the answer. */
  ticket(): number {
    return this.epoch;
  }

  set(key: string, answer: ReadAnswer, ticket: number): void {
    if (!this.entries || ticket !== this.epoch) return;
    this.entries.set(key, { answer });
    if (answer instanceof Answer) {
      // A compressed form made later is counted then: a new entry object makes the cache measure again.
      answer.onGrow = () => {
        if (this.entries?.peek(key)?.answer === answer) this.entries.set(key, { answer });
      };
    }
  }

  /**
   * `load()`, unless a load of the same key is under way: concurrent requests for an answer not held
   * yet wait for one load, rather than each reading and serializing it (a list of catalogs can be
   * megabytes). Its outcome, answer or error, goes to every waiter; only answers are kept, by `load`.
   * A request that comes after a `clear()` never waits for a load begun before it.
   */
  once(key: string, load: () => Promise<ReadAnswer>): Promise<ReadAnswer> {
    const loadKey = `${this.epoch}|${key}`;
    const pending = this.loading.get(loadKey);
    if (pending) return pending;
    const started = load().finally(() => this.loading.delete(loadKey));
    this.loading.set(loadKey, started);
    return started;
  }

  /** The positions of a list of Resources, kept as answers are, until the data changes. */
  positions(key: string): ListPositions | undefined {
    return this.lists.get(key);
  }

  keepPositions(key: string, positions: ListPositions, ticket: number): void {
    if (ticket === this.epoch) this.lists.set(key, positions);
  }

  /** Forgets every answer and list position; those being made now are not kept either. */
  clear(): void {
    this.epoch++;
    this.entries?.clear();
    this.lists.clear();
  }

  get stats(): AnswerCacheStats {
    return {
      entries: this.entries?.size ?? 0,
      bytes: this.entries?.calculatedSize ?? 0,
      hits: this.hits,
      misses: this.misses,
    };
  }
}

function bytesOf(answer: ReadAnswer): number {
  return answer instanceof Answer ? answer.bytes : LAZY_ANSWER_BYTES;
}
