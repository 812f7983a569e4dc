/** Bytes of one chunk of a spool: larger texts get a chunk of their own. */
const CHUNK_BYTES = 1024 * 1024;

/** Where a spool put something: its chunk and its first byte there. */
export interface SpoolPlace {
  readonly chunk: Buffer;
  readonly at: number;
}

/**
 * Texts and digests of a request body kept as bytes outside the JavaScript heap, a chunk of a mebibyte
 * holding thousands of them: what a write of 100,000 Resources holds from the check to the commit,
 * where 100,000 strings and their headers would be twice their size on the heap, and twice again
 * before the collector reclaims what the write let go (D30). Only well-formed text is put (UTF-8 gives
 * it back as it was).
 *
 * @example
 * const spool = new BodySpool();
 * const place = spool.put([Buffer.from('ab', 'hex')], ['text']);
 * place.chunk.toString('utf8', place.at + 1, place.at + 5); // 'text'
 */
export class BodySpool {
  private chunk = Buffer.allocUnsafe(0);
  private used = 0;

  /** @param chunkBytes the size of a chunk; 0 for a spool of one put, sized to it. */
  constructor(private readonly chunkBytes = CHUNK_BYTES) {}

  /** Puts `digests` (bytes) and then `texts` (UTF-8) next to each other; returns where they begin. */
  put(digests: readonly Buffer[], texts: readonly string[]): SpoolPlace {
    let size = 0;
    for (const digest of digests) size += digest.length;
    for (const text of texts) size += Buffer.byteLength(text);
    if (this.used + size > this.chunk.length) {
      this.chunk = Buffer.allocUnsafe(Math.max(this.chunkBytes, size));
      this.used = 0;
    }
    const place = { chunk: this.chunk, at: this.used };
    for (const digest of digests) this.used += digest.copy(this.chunk, this.used);
    for (const text of texts) this.used += this.chunk.write(text, this.used);
    return place;
  }
}
