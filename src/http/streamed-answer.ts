import { pipeline, Readable, Transform } from 'node:stream';
import zlib from 'node:zlib';

/**
 * Answers too large to hold in memory (the catalogs list of a Catalog of 100,000 Resources is tens of
 * megabytes), written as they are read (D30): each request is sent its own stream of the body's
 * blocks, made from storage as the socket takes them (`stream.pipeline`, with its back-pressure), and
 * through a compressor of its own for a compressed representation. What a version pins never changes,
 * so every stream of one answer has the same bytes, and its validator is known before the first.
 */

/** Bytes per block of the identity body: what is read from storage and written to the socket at once. */
export const BLOCK_BYTES = 64 * 1024;

/**
 * Bytes written to a compressor at once. Brotli's output depends on how its input is cut, so the cut is
 * fixed: a body held whole and one written as it is read are compressed in the same runs, and have the
 * same bytes. Each write is a turn of the event loop and back from libuv's pool: runs of 1 MiB keep a
 * large list's turns few under load (docs/guides/sizing.md).
 */
export const RUN_BYTES = 1024 * 1024;

/**
 * Brotli's fastest setting but one, and a window of 1 MiB: a stream is compressed once per request, and
 * an encoder then holds little (docs/guides/sizing.md gives its cost on the largest list).
 */
const STREAM_BROTLI: zlib.BrotliOptions = {
  params: {
    [zlib.constants.BROTLI_PARAM_QUALITY]: 1,
    [zlib.constants.BROTLI_PARAM_LGWIN]: 20,
  },
};

export type StreamEncoding = 'br' | 'gzip';

/** Writes text straight into a block, without a buffer of its own per part. */
const encoder = new TextEncoder();

/**
 * The blocks of `parts` (text made in pieces of any size), each exactly `blockBytes` but the last: the
 * same text always gives the same blocks, so a compressor fed them always writes the same bytes (a
 * representation's strong ETag holds for every request). A character whose bytes do not fit in what
 * is left of a block is cut between it and the next, as the bytes of the whole text would be.
 */
export async function* blocksOf(
  parts: AsyncIterable<string>,
  blockBytes: number = BLOCK_BYTES,
): AsyncGenerator<Buffer> {
  let block = Buffer.allocUnsafe(blockBytes);
  let used = 0;
  for await (const part of parts) {
    let rest = part;
    while (rest.length > 0) {
      const { read, written } = encoder.encodeInto(rest, block.subarray(used));
      used += written;
      rest = rest.slice(read);
      let carried: Buffer | undefined;
      if (used < blockBytes && rest.length > 0) {
        // The next character does not fit whole: its first bytes end this block, the others begin the next.
        const character = String.fromCodePoint(rest.codePointAt(0)!);
        const bytes = Buffer.from(character);
        const fitted = bytes.copy(block, used);
        used += fitted;
        carried = bytes.subarray(fitted);
        rest = rest.slice(character.length);
      }
      if (used === blockBytes) {
        yield block;
        block = Buffer.allocUnsafe(blockBytes);
        used = carried ? carried.copy(block) : 0;
      }
    }
  }
  if (used > 0) yield block.subarray(0, used);
}

/** `bytes` in consecutive pieces of `size` bytes (the last may be shorter), none copied. */
function* piecesOf(bytes: Buffer, size: number): Generator<Buffer> {
  for (let at = 0; at < bytes.length; at += size) yield bytes.subarray(at, at + size);
}

/** The compressor of `encoding`, as every stream of an answer is compressed. */
function compressor(encoding: StreamEncoding): zlib.BrotliCompress | zlib.Gzip {
  // Room for what a run compresses to (about a sixth of itself on the catalogs list), so that a run
  // comes back in one turn, not in 16 KiB pieces.
  const chunkSize = RUN_BYTES / 2;
  return encoding === 'br'
    ? zlib.createBrotliCompress({ ...STREAM_BROTLI, chunkSize })
    : zlib.createGzip({ chunkSize });
}

/**
 * A body held whole, compressed as a stream of it is compressed: an answer that is held on one
 * instance and written as it is read on another (a smaller budget) has the same bytes in every
 * encoding, as its validator says.
 */
export async function compressLikeStream(encoding: StreamEncoding, body: Buffer): Promise<Buffer> {
  const parts: Buffer[] = [];
  const out = pipeline(
    Readable.from(piecesOf(body, RUN_BYTES), { objectMode: true, highWaterMark: 1 }),
    compressor(encoding),
    () => {},
  );
  for await (const part of out) parts.push(part as Buffer);
  return Buffer.concat(parts);
}

/**
 * Ends a stream whose reader took nothing for `stallMs`: a client that stops reading holds its own
 * request's stream (its compressor, a block) until then, and nothing of anyone else's.
 */
class StallGuard extends Transform {
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly stallMs: number) {
    super({ highWaterMark: 1, writableHighWaterMark: 1, objectMode: true });
    this.arm();
  }

  private arm(): void {
    if (!Number.isFinite(this.stallMs)) return;
    clearTimeout(this.timer);
    this.timer = setTimeout(
      () => this.destroy(new Error(`the client took nothing for ${this.stallMs} ms`)),
      this.stallMs,
    );
    this.timer.unref();
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, callback: () => void): void {
    this.push(chunk);
    this.arm();
    callback();
  }

  override _read(size: number): void {
    // Asked for more: the client took what was given.
    this.arm();
    super._read(size);
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    clearTimeout(this.timer);
    callback(error);
  }
}

/**
 * An answer too large to hold: its validator is known before its body, and each request for it is sent
 * a stream of its own over the body's blocks. Kept in memory in place of its body, it holds what makes
 * the body (`heldBytes` of it).
 */
export class StreamedAnswer {
  /**
   * @param tag the validator of the identity body, made before the body (see `tagOf`)
   * @param heldBytes what this answer holds while it is kept, for the answer budget
   * @param body the identity body in blocks of the size given, made afresh for each request (`blocksOf`)
   */
  constructor(
    readonly tag: string,
    readonly heldBytes: number,
    private readonly body: (blockBytes: number) => AsyncGenerator<Buffer>,
  ) {}

  /**
   * The body in `encoding` (identity when undefined), read from storage as the stream is read; a
   * stream destroyed (its client went away) stops reading storage at once.
   *
   * @param stallMs how long the reader may take nothing before the stream ends with an error: never,
   *   unless given
   */
  open(encoding: StreamEncoding | undefined, stallMs = Number.POSITIVE_INFINITY): Readable {
    const source = Readable.from(this.body(encoding === undefined ? BLOCK_BYTES : RUN_BYTES), {
      objectMode: true,
      highWaterMark: 1,
    });
    const guard = new StallGuard(stallMs);
    const done = () => {};
    if (encoding === undefined) return pipeline(source, guard, done);
    // Compressed output in pieces of at most a block, as the identity body is sent.
    const pieces = new Transform({
      readableObjectMode: true,
      readableHighWaterMark: 1,
      transform(chunk: Buffer, _encoding, callback) {
        for (const piece of piecesOf(chunk, BLOCK_BYTES)) this.push(piece);
        callback();
      },
    });
    return pipeline(source, compressor(encoding), pieces, guard, done);
  }
}
