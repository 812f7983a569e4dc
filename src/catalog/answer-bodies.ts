import { LRUCache } from 'lru-cache';
import type { SerializedJson } from './serialized-rows.js';

/** An answer ready to send: its UTF-8 JSON body, and the digest its strong ETag is made from. */
export interface SerializedAnswer {
  readonly body: Buffer;
  readonly digest: string;
}

/**
 * Whole answer bodies by digest. A digest stands for exactly one JSON text, so an entry can never be
 * stale: a page whose items and meta are unchanged is sent from the bytes joined the first time,
 * without copying or encoding half a megabyte of pins again, and a changed page has another digest.
 */
export class AnswerBodies {
  private readonly bodies: LRUCache<string, Buffer>;

  constructor(maxBytes: number) {
    this.bodies = new LRUCache({ maxSize: maxBytes, sizeCalculation: (body) => Math.max(1, body.length) });
  }

  /** The answer `json` makes: its only chunk as it is, or its chunks joined once per digest. */
  answerOf(json: SerializedJson): SerializedAnswer {
    const { chunks, digest } = json;
    if (chunks.length === 1) return { body: chunks[0]!, digest };
    let body = this.bodies.get(digest);
    if (body === undefined) {
      body = Buffer.concat(chunks);
      this.bodies.set(digest, body);
    }
    return { body, digest };
  }

  get stats(): { entries: number; bytes: number } {
    return { entries: this.bodies.size, bytes: this.bodies.calculatedSize };
  }
}
