import { Readable } from 'node:stream';
import zlib from 'node:zlib';
import pLimit from 'p-limit';
import { yieldIfBusy } from '../foundation/pace.js';

/**
 * Answers too large to hold in memory (the catalogs list of a Catalog of 100,000 Resources is tens of
 * megabytes), written as they are read (D30): the body is made block by block from storage, each block
 * sent to the socket (through the compressor, for a compressed representation) and let go.
 *
 * Requests for the same representation that arrive together share one pass over storage: the pass
 * hands each block to every reader, keeps the blocks a reader has not taken yet, and waits when its
 * slowest reader is {@link AHEAD_BYTES} behind, so a pass holds at most that much whatever the body's
 * size. A reader may join a pass while its first {@link JOIN_WINDOW_BYTES} are still held (it is sent
 * them first); later ones start a pass of their own. A pass whose readers have all gone stops reading
 * storage at once.
 */

/**
 * Bytes per block: what a pass hands its readers at once (a compressed pass cuts its text in runs of
 * {@link RUN_BYTES} for its compressor).
 */
export const BLOCK_BYTES = 64 * 1024;
/**
 * A pass may be joined for its first {@link GATHER_MS} (the requests of a moment, each sent the blocks
 * made before it came), while it has made at most {@link JOIN_WINDOW_BYTES}: a pass that has made
 * that much waits for the moment to pass, so that a body of any size holds no more meanwhile.
 */
const GATHER_MS = 100;
/**
 * 1 MiB: under a mixed load a pass takes seconds, so passes of successive versions of a list overlap,
 * and with windows of 4 MiB a serving instance held about 13 MB more (`npm run bench:scale`, D30).
 */
const JOIN_WINDOW_BYTES = 1024 * 1024;
/** How far a pass runs ahead of its slowest reader before it waits. */
const AHEAD_BYTES = 1024 * 1024;
/**
 * Passes reading storage at once, across every streamed answer; a pass waiting for a slow reader gives
 * its turn up (`Pass.run`), and takes another after those waiting for one.
 */
const CONCURRENT_PASSES = 4;
const passTurns = pLimit(CONCURRENT_PASSES);
/**
 * Passes begun and not ended, reading or waiting for a reader: each holds up to a mebibyte of blocks
 * ahead of its slowest reader and, compressed, a run or two and an encoder, a few megabytes in all.
 * More wait to begin (and may be joined meanwhile), and while one does, the open passes are crowded:
 * each waits for a reader that holds it back at most {@link CROWDED_WAIT_MS} at a time
 * (`letGoStalled`). That is a least rate, not a bound on how long a pass is open: clients that take
 * nothing are let go at once when another answer needs the room, but as many clients that each read
 * faster than that hold every pass for as long as their answers take.
 */
export const OPEN_PASSES = 8;
const openPasses = pLimit(OPEN_PASSES);
/**
 * While a pass waits to begin, how long an open pass waits for a reader that holds it back (the
 * reader is more than {@link AHEAD_BYTES} behind) before that reader is let go: one that takes less
 * than about a block (64 KiB) a second then. Uncrowded, a reader is waited for until it takes nothing
 * for its `stallMs` (the request timeout).
 */
export const CROWDED_WAIT_MS = 1_000;
/** Open passes waiting for a slow reader, told when a pass begins to wait for room. */
const waitingPasses = new Set<Pass>();
/** Passes waiting to begin (those whose readers all left no longer count: see `crowdedSince`). */
const queuedPasses = new Set<Pass>();
/** Since when a pass with readers has waited to begin, without a moment when none did. */
let crowdedSince: number | undefined;

/** Notes that no pass with readers may wait to begin any more. */
function checkCrowding(): void {
  for (const pass of queuedPasses) if (pass.wanted) return;
  crowdedSince = undefined;
}

/**
 * A compressed stream is made once per pass, not once per answer kept: brotli's fastest setting but
 * one, and a window of 1 MiB, so that an encoder holds little. On the catalogs list of 1,000,000
 * Resources (25 MB), written 1 MiB at a time, it took 72 ms where quality 4 took 431 ms, for 1 % more
 * bytes (4.36 against 4.30 MB: the pins repeat themselves within a few hundred bytes).
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
 * representation's strong ETag holds for every pass). A character whose bytes do not fit in what is
 * left of a block is cut between it and the next, as the bytes of the whole text would be.
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

/**
 * A body held whole, compressed as a pass over its blocks would compress it: an answer that is held on
 * one instance and written as it is read on another (a smaller budget) has the same bytes in every
 * encoding, as its validator says.
 */
export async function compressLikeStream(encoding: StreamEncoding, body: Buffer): Promise<Buffer> {
  const parts: Buffer[] = [];
  // In runs of the size `blocksOf` cuts the text of a pass it compresses.
  for await (const part of compressed(piecesOf(body, RUN_BYTES), encoding)) parts.push(part);
  return Buffer.concat(parts);
}

/**
 * Bytes written to a compressor at once: a compressed pass cuts its text in blocks of this size.
 * Each write is a turn of the event loop and back from libuv's pool, and under a mixed load a turn
 * takes tens of milliseconds: a list of 25 MB written 64 KiB at a time took 15 s to send as `br`,
 * 256 KiB at a time 2-3 s, 1 MiB at a time 0.6-1.2 s; asked for once a second, runs of 256 KiB left
 * the requests for it waiting past 5 s (`npm run bench:scale`). Brotli's output depends on how its
 * input is cut, so the cut is fixed.
 */
export const RUN_BYTES = 1024 * 1024;

/**
 * `runs` through the compressor of `encoding`, each written on its own, so that the same runs
 * (`blocksOf` at {@link RUN_BYTES}, or a held body cut as it would be) give the same bytes (the
 * compressor's output depends on how its input is cut); storage is read as the compressor takes them.
 */
async function* compressed(
  runs: Iterable<Buffer> | AsyncIterable<Buffer>,
  encoding: StreamEncoding,
): AsyncGenerator<Buffer> {
  // Room for what a few runs compress to (a run, about a sixth of itself on the catalogs list), so
  // that a run comes back in one turn, not in 16 KiB pieces; what room a run leaves, the next takes.
  const chunkSize = RUN_BYTES / 2;
  const compressor =
    encoding === 'br'
      ? zlib.createBrotliCompress({ ...STREAM_BROTLI, chunkSize })
      : zlib.createGzip({ chunkSize });
  const input = Readable.from(runs, { objectMode: true, highWaterMark: 1 });
  input.pipe(compressor);
  input.on('error', (error) => compressor.destroy(error));
  try {
    // In blocks of at most a block's size, as the identity body is sent: a reader takes one at a time,
    // and one that takes a block in its time is waited for (see `Pass.letGoStalled`).
    for await (const chunk of compressor) yield* piecesOf(chunk as Buffer, BLOCK_BYTES);
  } finally {
    // A pass stopped early: the compressor and, through the input, the reading of storage stop too.
    input.destroy();
    compressor.destroy();
  }
}

/** One reader of a pass: a request's body. */
class PassReader extends Readable {
  /** The index (from the pass's start) of the next block this reader takes. */
  next = 0;
  /** Whether it asked for a block the pass had not made yet. */
  wants = false;
  /** Whether its end (or the pass's failure) has been given it. */
  finished = false;
  /** When it last took a block (or joined). */
  takenAt = performance.now();

  /** @param stallMs how long it may take nothing while the pass waits for it (see `Pass.letGoStalled`) */
  constructor(
    private readonly pass: Pass,
    readonly stallMs: number,
  ) {
    super({ highWaterMark: BLOCK_BYTES });
  }

  override _read(): void {
    this.wants = true;
    this.pass.feed(this);
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    this.pass.leave(this);
    callback(error);
  }
}

/** One pass over a body's blocks, handed to every reader that joined it. */
class Pass {
  /** Blocks held, the first of them block number `first` of the pass. */
  private blocks: Buffer[] = [];
  private first = 0;
  /** Blocks made so far. */
  private made = 0;
  private heldBytes = 0;
  private readonly readers = new Set<PassReader>();
  private ended = false;
  private failure: unknown;
  private stopped = false;
  private resume: (() => void) | undefined;
  private stallTimer: NodeJS.Timeout | undefined;
  /** Since when the pass has waited, in its present wait for a reader. */
  private waitingSince = 0;
  /** Until when new readers may join, while the first blocks are all held. */
  private gatheringUntil = Number.POSITIVE_INFINITY;
  private closedToJoiners = false;

  constructor(
    source: () => AsyncGenerator<Buffer>,
    private readonly closed: () => void,
  ) {
    const room = openPasses.activeCount < OPEN_PASSES;
    void openPasses(() => this.run(source));
    if (!room) {
      // This one waits to begin: the passes waiting for their readers wait less from now on.
      queuedPasses.add(this);
      crowdedSince ??= performance.now();
      for (const pass of waitingPasses) pass.letGoStalled();
    }
  }

  /** Whether someone still reads what the pass makes, or will. */
  get wanted(): boolean {
    return !this.stopped;
  }

  /** Whether a new reader may join: the pass holds every block it made, and its moment lasts. */
  get joinable(): boolean {
    if (!this.closedToJoiners && performance.now() >= this.gatheringUntil) this.unjoinable();
    return !this.closedToJoiners;
  }

  join(stallMs: number): Readable {
    const reader = new PassReader(this, stallMs);
    this.readers.add(reader);
    return reader;
  }

  /** Hands `reader` the blocks it has not had, as far as it takes them. */
  feed(reader: PassReader): void {
    while (reader.wants && reader.next < this.made) {
      const block = this.blocks[reader.next - this.first]!;
      reader.next++;
      reader.takenAt = performance.now();
      reader.wants = reader.push(block);
    }
    if (reader.next === this.made && this.ended && !reader.finished) {
      reader.finished = true;
      if (this.failure === undefined) reader.push(null);
      else reader.destroy(this.failure instanceof Error ? this.failure : new Error(String(this.failure)));
      return;
    }
    this.release();
  }

  leave(reader: PassReader): void {
    this.readers.delete(reader);
    if (this.readers.size === 0 && !this.ended) {
      // Nobody reads what it would make: storage is read no further, and it needs no room.
      this.stopped = true;
      this.unjoinable();
      if (queuedPasses.has(this)) checkCrowding();
    }
    this.release();
  }

  /**
   * Makes the body's blocks in turns: a turn lasts until the body ends or the slowest reader is
   * {@link AHEAD_BYTES} behind, and the pass waits for that reader with no turn held, so that a reader
   * that stops taking its answer holds up its own pass, not every streamed answer of the instance
   * (unless there are {@link OPEN_PASSES} of them); it takes its next turn after the passes already
   * waiting for one.
   */
  private async run(source: () => AsyncGenerator<Buffer>): Promise<void> {
    if (queuedPasses.delete(this)) checkCrowding();
    let blocks: AsyncGenerator<Buffer> | undefined;
    try {
      for (;;) {
        // One stopped while it waited for room or for its turn ends without another.
        if (this.stopped) break;
        const more = await passTurns(async () => {
          if (this.stopped) return false;
          if (blocks === undefined) {
            this.gatheringUntil = performance.now() + GATHER_MS;
            blocks = source();
          }
          return this.make(blocks);
        });
        if (!more) break;
        while (!this.stopped && this.aheadBytes() > AHEAD_BYTES) {
          waitingPasses.add(this);
          this.waitingSince = performance.now();
          await new Promise<void>((resolve) => {
            this.resume = resolve;
            this.letGoStalled();
          });
          waitingPasses.delete(this);
        }
        if (this.stopped) break;
      }
    } catch (error) {
      this.failure = error;
    } finally {
      this.ended = true;
      this.unjoinable();
      try {
        await blocks?.return(undefined);
      } catch (error) {
        this.failure ??= error;
      }
      for (const reader of this.readers) this.feed(reader);
    }
  }

  /** Makes blocks until the body ends (false) or the slowest reader is too far behind (true). */
  private async make(blocks: AsyncGenerator<Buffer>): Promise<boolean> {
    for (;;) {
      if (this.stopped) return false;
      const { value, done } = await blocks.next();
      if (done || this.stopped) return false;
      this.blocks.push(value);
      this.made++;
      this.heldBytes += value.length;
      for (const reader of this.readers) this.feed(reader);
      // SQLite's statements resolve without a turn of the event loop: the turn is given here (D20).
      await yieldIfBusy();
      if (this.heldBytes >= JOIN_WINDOW_BYTES && this.joinable) {
        // The window is full: let the moment end before making more, then close it.
        await new Promise((resolve) => setTimeout(resolve, this.gatheringUntil - performance.now()));
        this.unjoinable();
      }
      if (this.aheadBytes() > AHEAD_BYTES) return true;
    }
  }

  /**
   * While the pass waits: each reader behind it that has taken nothing for its `stallMs` is let go
   * (its request fails, and its connection is closed), so that the others are sent the rest; the
   * others are looked at again when their time comes. A reader that takes its blocks slowly but
   * steadily is waited for, unless a pass waits to begin meanwhile: then a reader that keeps this
   * pass waiting {@link CROWDED_WAIT_MS}, counted from when both began, is let go too.
   */
  private letGoStalled(): void {
    if (this.resume === undefined) return;
    const now = performance.now();
    const crowdedDue =
      crowdedSince === undefined
        ? Number.POSITIVE_INFINITY
        : Math.max(crowdedSince, this.waitingSince) + CROWDED_WAIT_MS;
    let soonest = Number.POSITIVE_INFINITY;
    for (const reader of this.readers) {
      if (reader.next >= this.made) continue;
      const stalledDue = reader.takenAt + reader.stallMs;
      const due = this.behindBytes(reader) > AHEAD_BYTES ? Math.min(stalledDue, crowdedDue) : stalledDue;
      if (due > now) soonest = Math.min(soonest, due);
      else if (due === stalledDue)
        reader.destroy(new Error(`the client took nothing of the answer for ${reader.stallMs} ms`));
      else {
        reader.destroy(
          new Error(`the client kept its answer waiting ${CROWDED_WAIT_MS} ms while another waited to begin`),
        );
      }
    }
    clearTimeout(this.stallTimer);
    // Letting one go may have resumed the pass.
    if (this.resume !== undefined && soonest < Number.POSITIVE_INFINITY) {
      this.stallTimer = setTimeout(() => this.letGoStalled(), soonest - now);
      this.stallTimer.unref();
    }
  }

  private unjoinable(): void {
    if (this.closedToJoiners) return;
    this.closedToJoiners = true;
    this.closed();
  }

  /** Bytes made that the slowest reader has not taken. */
  private aheadBytes(): number {
    return this.bytesFrom(this.slowest());
  }

  /** Bytes made that `reader` has not taken. */
  private behindBytes(reader: PassReader): number {
    return this.bytesFrom(reader.next);
  }

  private bytesFrom(block: number): number {
    let bytes = 0;
    for (let index = Math.max(block, this.first); index < this.made; index++) {
      bytes += this.blocks[index - this.first]!.length;
    }
    return bytes;
  }

  private slowest(): number {
    let slowest = this.made;
    for (const reader of this.readers) slowest = Math.min(slowest, reader.next);
    return slowest;
  }

  /** Lets go of the blocks every reader has taken (once nobody may join), and wakes the pass. */
  private release(): void {
    if (this.closedToJoiners) {
      const drop = this.slowest() - this.first;
      if (drop > 0) {
        for (const block of this.blocks.splice(0, drop)) this.heldBytes -= block.length;
        this.first += drop;
      }
    }
    const resume = this.resume;
    if (resume && (this.stopped || this.aheadBytes() <= AHEAD_BYTES)) {
      this.resume = undefined;
      clearTimeout(this.stallTimer);
      resume();
    }
  }
}

/**
 * An answer too large to hold: its validator is known before its body, and each request for it is sent
 * a pass over the body's blocks, shared with the requests for the same representation that arrive with
 * it. Kept in memory in place of its body, it holds what makes the body (`heldBytes` of it).
 */
export class SharedStream {
  private readonly passes = new Map<StreamEncoding | 'identity', Pass>();

  /**
   * @param tag the validator of the identity body, made before the body (see `tagOf`)
   * @param heldBytes what this answer holds while it is kept, for the answer budget
   * @param body the identity body in blocks of the size given, made afresh for each pass (`blocksOf`)
   */
  constructor(
    readonly tag: string,
    readonly heldBytes: number,
    private readonly body: (blockBytes: number) => AsyncGenerator<Buffer>,
  ) {}

  /**
   * The body in `encoding` (identity when undefined), read from a pass shared where it can be.
   *
   * @param stallMs how long a reader may take nothing while its pass waits for it before it is let go
   *   (see `Pass.letGoStalled`): never, unless given
   */
  open(encoding: StreamEncoding | undefined, stallMs = Number.POSITIVE_INFINITY): Readable {
    const name = encoding ?? 'identity';
    let pass = this.passes.get(name);
    if (!pass?.joinable) {
      const made: Pass = new Pass(
        () => (encoding === undefined ? this.body(BLOCK_BYTES) : compressed(this.body(RUN_BYTES), encoding)),
        () => {
          if (this.passes.get(name) === made) this.passes.delete(name);
        },
      );
      pass = made;
      this.passes.set(name, pass);
    }
    return pass.join(stallMs);
  }
}
