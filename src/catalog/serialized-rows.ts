import { createHash } from 'node:crypto';
import { LRUCache } from 'lru-cache';

/**
 * JSON serialized already, as UTF-8 bytes in one or more chunks (joined only when a whole answer is
 * built, see `AnswerBodies`), with the digest that stands for it in validators and cache keys.
 */
export interface SerializedJson {
  readonly chunks: readonly Buffer[];
  /**
   * A base64url SHA-256 that changes whenever the JSON does: of the JSON itself, or for JSON
   * assembled from parts, of the parts' digests.
   */
  readonly digest: string;
}

export function digestOf(text: string | Buffer): string {
  return createHash('sha256').update(text).digest('base64url');
}

export function serialized(json: string): SerializedJson {
  const bytes = Buffer.from(json);
  return { chunks: [bytes], digest: digestOf(bytes) };
}

/**
 * The state of a row as one string: every column it was read with, so that a row changed in any of
 * them (whether or not its `updated_at` moved) has another state. The keys and values of a row read
 * by one query come in one order, so equal rows give equal strings.
 */
export function rowState(row: object): string {
  return JSON.stringify(row);
}

export interface SerializedRowsOptions {
  /** Upper bound of the memory the entries hold: their state and JSON, two bytes a character. */
  readonly maxBytes: number;
}

interface Entry {
  readonly state: string;
  readonly json: SerializedJson;
}

/**
 * The serialized JSON of answers (or parts of answers) that are a function of one database row and
 * nothing else, by row id. An entry is used only for the very state of the row it was made from (see
 * `rowState`), so that any write shows in the next answer; holding one entry per id keeps an older
 * state from lingering. Least recently used entries go first once `maxBytes` is reached; an entry
 * larger than that is not kept at all.
 */
export class SerializedRows {
  private readonly entries: LRUCache<string, Entry>;

  constructor(options: SerializedRowsOptions) {
    this.entries = new LRUCache({
      maxSize: options.maxBytes,
      sizeCalculation: (entry) =>
        Math.max(1, (entry.state.length + entry.json.digest.length) * 2 + byteLength(entry.json)),
    });
  }

  /** The JSON made from the row `id` in `state`, if it is still held. */
  find(id: string, state: string): SerializedJson | undefined {
    const entry = this.entries.get(id);
    return entry?.state === state ? entry.json : undefined;
  }

  /** Keeps `json`, made from the row `id` in `state` alone, and returns it serialized. */
  remember(id: string, state: string, json: string): SerializedJson {
    const entry = { state, json: serialized(json) };
    this.entries.set(id, entry);
    return entry.json;
  }

  /** `find`, or else `serialize` the row and `remember` it. */
  get(id: string, state: string, serialize: () => string): SerializedJson {
    return this.find(id, state) ?? this.remember(id, state, serialize());
  }

  /** Entries held and their estimated bytes, for tests and operators. */
  get stats(): { entries: number; bytes: number } {
    return { entries: this.entries.size, bytes: this.entries.calculatedSize };
  }
}

function byteLength(json: SerializedJson): number {
  let length = 0;
  for (const chunk of json.chunks) length += chunk.length;
  return length;
}
