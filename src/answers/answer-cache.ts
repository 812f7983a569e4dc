import { LRUCache } from 'lru-cache';
import type { ListPositions } from '../catalog/read-repository.js';
import type { FollowedChanges } from '../changes/change-follower.js';
import { ALWAYS_TRUSTED, type Trust } from '../changes/memory-trust.js';
import { Answer, type ReadAnswer } from '../http/answer.js';
import { StreamedAnswer } from '../http/streamed-answer.js';
import { type CountedSeries, Metrics } from '../observability/metrics.js';
import type { AnswerKey } from './answer-keys.js';

/**
 * Keys the admission remembers having seen, as hashes in a table of this many slots: a full budget
 * holds some tens of thousands of answers, and a slot is one byte.
 */
const SEEN_SLOTS = 1 << 18;

/**
 * Whether a key has been asked for before, recently: the admission of a full budget (`AnswerCache.set`).
 * A key's first miss marks its slot and is not kept; its second is. Marks are forgotten all at once
 * when as many keys have been marked as there are slots, so that what was asked for once long ago
 * counts as new.
 */
class SeenKeys {
  private readonly slots = new Uint8Array(SEEN_SLOTS);
  private marked = 0;

  /** Marks `key`; whether it was marked already. */
  mark(key: string): boolean {
    // FNV-1a over the key's UTF-16 units: cheap, and no caller chooses what collides.
    let hash = 0x811c9dc5;
    for (let i = 0; i < key.length; i++) hash = Math.imul(hash ^ key.charCodeAt(i), 0x01000193);
    const slot = (hash >>> 0) & (SEEN_SLOTS - 1);
    if (this.slots[slot] === 1) return true;
    if (++this.marked > SEEN_SLOTS) {
      this.slots.fill(0);
      this.marked = 1;
    }
    this.slots[slot] = 1;
    return false;
  }
}

/** What a lazy answer is counted as: its row and closure, not its body, which it does not hold. */
const LAZY_ANSWER_BYTES = 1024;
/** An answer held whole takes at most this part of the budget (`share`). */
const ANSWER_SHARES = 16;
/**
 * What an entry holds beyond its answer's bytes and its key's characters: the answer's object, its
 * validator and forms, the entry and the cache's own bookkeeping, about 900 bytes measured on the heap
 * (test/unit/answer-budget.test.ts). Counted, so that a budget full of small details holds what it
 * says (D30).
 */
const ENTRY_OVERHEAD_BYTES = 1024;

interface Entry {
  readonly answer: ReadAnswer;
  /** The namespaces whose changes make it stale: `svc`, an account id, or both. */
  readonly namespaces: readonly string[];
}

interface HeldPositions {
  readonly positions: ListPositions;
  readonly namespaces: readonly string[];
}

export interface AnswerCacheStats {
  readonly entries: number;
  readonly bytes: number;
  readonly hits: number;
  readonly misses: number;
  /** Answers not kept by a full budget: asked for once, recently (see `set`). */
  readonly refused: number;
}

/**
 * Answers of the read operations, by a key that names everything that decides their bytes: the
 * operation, its parameters, and whose view it is (see answer-keys.ts, the one key scheme). Bounded by a
 * byte budget (`PLAYBOOK_ANSWER_CACHE_BYTES`), least recently used first out, compressed forms counted
 * as they are made.
 *
 * Each answer is kept with the namespaces it is made of (`svc` for service-owned content, the account
 * for an account's own), and only a change in one of them drops it (`drop`, told by the change
 * follower): one account's writes leave every other account's answers in memory. An answer made from
 * reads that began before a drop of one of its namespaces is never kept: `ticket()` is taken before
 * reading, and `set` refuses a ticket older than the last drop of any namespace the answer names.
 */
export class AnswerCache {
  private readonly entries: LRUCache<AnswerKey, Entry> | undefined;
  /** The positions of lists of Resources (see `ListPositions`): small, and kept whatever the budget. */
  private readonly lists = new LRUCache<AnswerKey, HeldPositions>({ max: 1000 });
  private readonly loading = new Map<string, Promise<ReadAnswer>>();
  /** Counts drops and clears; a ticket is its value when taken. */
  private drops = 0;
  private lastClear = 0;
  /** The drop count at each namespace's last drop. */
  private readonly lastDrop = new Map<string, number>();
  private hits = 0;
  private misses = 0;
  /** Answers not kept, a full budget holding better ones (see `set`). */
  private refused = 0;
  private readonly seen = new SeenKeys();

  /** The lookups' series of the metrics (D25), bound once. */
  private readonly hit: CountedSeries<'result'>;
  private readonly miss: CountedSeries<'result'>;

  /**
   * @param maxBytes the budget; 0 keeps nothing (every read is made afresh).
   * @param trust whether what is held may be served now (D31): not after a database outage until the
   *   change log has been followed again, when a held answer may miss a change made meanwhile.
   */
  constructor(
    private readonly maxBytes: number,
    metrics: Metrics = new Metrics(),
    private readonly trust: Trust = ALWAYS_TRUSTED,
  ) {
    this.hit = metrics.answerCacheLookups.bind({ result: 'hit' });
    this.miss = metrics.answerCacheLookups.bind({ result: 'miss' });
    this.entries =
      maxBytes > 0
        ? new LRUCache<AnswerKey, Entry>({
            maxSize: maxBytes,
            sizeCalculation: (entry, key) => ENTRY_OVERHEAD_BYTES + key.length * 2 + bytesOf(entry.answer),
          })
        : undefined;
  }

  /**
   * The most one answer may hold to be kept whole: a share of the budget, so that one large answer
   * never pushes out most of the others. A larger one is written as it is read each time it is asked
   * for (its validator and what makes it are kept instead, `StreamedAnswer`).
   */
  get share(): number {
    return this.maxBytes / ANSWER_SHARES;
  }

  get(key: AnswerKey): ReadAnswer | undefined {
    const answer = this.trust.trusted ? this.entries?.get(key)?.answer : undefined;
    if (answer === undefined) {
      this.misses++;
      this.miss.inc();
    } else {
      this.hits++;
      this.hit.inc();
    }
    return answer;
  }

  /**
   * The answer under `key` when it is held whole, counted as a hit; anything else is `undefined` and
   * counted as nothing, for the request's usual path (`get`) to look again and count what it finds.
   */
  held(key: AnswerKey): Answer | undefined {
    if (!this.trust.trusted) return undefined;
    const answer = this.entries?.get(key)?.answer;
    if (!(answer instanceof Answer)) return undefined;
    this.hits++;
    this.hit.inc();
    return answer;
  }

  /** Counts a miss of a lookup made by `held`, once the caller reads what it missed itself. */
  missed(): void {
    this.misses++;
    this.miss.inc();
  }

  /** Taken before reading what an answer is made of, and handed to `set` with the answer. */
  ticket(): number {
    return this.drops;
  }

  /**
   * Keeps `answer`, made of `namespaces`, unless one of them changed since `ticket` was taken.
   *
   * While the budget has room, every answer is kept. Once it is full, keeping one means evicting the
   * least recently used: an answer asked for once (a random read over more Resources than the budget
   * holds) is kept only when its key was asked for before, recently, so that a stream of reads that
   * never come again does not evict the answers that are read again and again (an admission policy,
   * as TinyLFU's doorkeeper does it).
   */
  set(key: AnswerKey, answer: ReadAnswer, ticket: number, namespaces: readonly string[]): void {
    // Nothing is kept while memory is not trusted (the change log not read since the database came
    // back): the follower could not yet drop what it will learn changed.
    if (!this.entries || !this.trust.trusted || !this.current(ticket, namespaces)) return;
    const full = this.entries.calculatedSize + ENTRY_OVERHEAD_BYTES + bytesOf(answer) > this.maxBytes;
    if (full && !this.seen.mark(key) && !this.entries.has(key)) {
      this.refused++;
      return;
    }
    const entry: Entry = { answer, namespaces };
    this.entries.set(key, entry);
    if (answer instanceof Answer) {
      // A compressed form made later is counted then: a new entry object makes the cache measure again.
      answer.onGrow = () => {
        if (this.entries?.peek(key)?.answer === answer) this.entries.set(key, { ...entry });
      };
    }
  }

  private current(ticket: number, namespaces: readonly string[]): boolean {
    if (this.lastClear > ticket) return false;
    return namespaces.every((namespace) => (this.lastDrop.get(namespace) ?? 0) <= ticket);
  }

  /**
   * `load()`, unless a load of the same key is under way: concurrent requests for an answer not held
   * yet wait for one load, rather than each reading and serializing it (a list of catalogs can be
   * megabytes). Its outcome, answer or error, goes to every waiter; only answers are kept, by `load`.
   * A request that comes after a drop never waits for a load begun before it.
   */
  once(key: AnswerKey, load: () => Promise<ReadAnswer>): Promise<ReadAnswer> {
    const loadKey = `${this.drops}|${key}`;
    const pending = this.loading.get(loadKey);
    if (pending) return pending;
    const started = load().finally(() => this.loading.delete(loadKey));
    this.loading.set(loadKey, started);
    return started;
  }

  /** The positions of a list of Resources, kept as answers are, until their namespace changes. */
  positions(key: AnswerKey): ListPositions | undefined {
    return this.trust.trusted ? this.lists.get(key)?.positions : undefined;
  }

  keepPositions(
    key: AnswerKey,
    positions: ListPositions,
    ticket: number,
    namespaces: readonly string[],
  ): void {
    if (this.trust.trusted && this.current(ticket, namespaces))
      this.lists.set(key, { positions, namespaces });
  }

  /**
   * Forgets the answers and list positions made of any of `namespaces`; those of them being made now
   * are not kept either. The rest stay.
   */
  drop(namespaces: Iterable<string>): void {
    const dropped = new Set(namespaces);
    if (dropped.size === 0) return;
    this.drops++;
    for (const namespace of dropped) this.lastDrop.set(namespace, this.drops);
    const touches = (held: { readonly namespaces: readonly string[] }) =>
      held.namespaces.some((namespace) => dropped.has(namespace));
    if (this.entries) {
      const stale: AnswerKey[] = [];
      for (const [key, entry] of this.entries.entries()) if (touches(entry)) stale.push(key);
      for (const key of stale) this.entries.delete(key);
    }
    const stalePositions: AnswerKey[] = [];
    for (const [key, held] of this.lists.entries()) if (touches(held)) stalePositions.push(key);
    for (const key of stalePositions) this.lists.delete(key);
  }

  /**
   * What the change follower learned: the namespaces of changes that decide answers (Catalogs,
   * Resources, an account's plan) are dropped; key and webhook endpoint events decide none. When the follower could not
   * say what changed, everything is.
   */
  follow(followed: FollowedChanges): void {
    if (followed.startAfresh) {
      this.clear();
      return;
    }
    const touched = new Set<string>();
    for (const change of followed.changes) {
      if (!change.type.startsWith('api_key.') && !change.type.startsWith('webhook_endpoint.')) {
        touched.add(change.namespace);
      }
    }
    this.drop(touched);
  }

  /** Forgets every answer and list position; those being made now are not kept either. */
  clear(): void {
    this.drops++;
    this.lastClear = this.drops;
    // Every namespace's last drop is at most the last clear from now on.
    this.lastDrop.clear();
    this.entries?.clear();
    this.lists.clear();
  }

  get stats(): AnswerCacheStats {
    return {
      entries: this.entries?.size ?? 0,
      bytes: this.entries?.calculatedSize ?? 0,
      hits: this.hits,
      misses: this.misses,
      refused: this.refused,
    };
  }
}

function bytesOf(answer: ReadAnswer): number {
  if (answer instanceof Answer) return answer.bytes;
  return answer instanceof StreamedAnswer ? answer.heldBytes : LAZY_ANSWER_BYTES;
}
