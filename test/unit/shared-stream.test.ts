import zlib from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { blocksOf, CROWDED_WAIT_MS, OPEN_PASSES, SharedStream } from '../../src/http/shared-stream.js';

async function* each(parts: readonly string[]): AsyncGenerator<string> {
  yield* parts;
}

/** An answer of `text` made in parts of 64 Ki characters, as stored pins are read. */
function answerOf(text: string, tag: string): SharedStream {
  const parts: string[] = [];
  for (let at = 0; at < text.length; at += 65_536) parts.push(text.slice(at, at + 65_536));
  return new SharedStream(tag, 0, (blockBytes) => blocksOf(each(parts), blockBytes));
}

async function received(body: NodeJS.ReadableStream): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of body) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString();
}

describe('passes over answers written as they are read (D30, D20)', () => {
  it('lets readers that take nothing hold up their own passes only, short of the passes that may be open', async () => {
    // More passes than may read storage at once, each with a reader that takes nothing: each makes
    // what it may make ahead of its reader, then waits for it with no turn held.
    const stalled = Array.from({ length: OPEN_PASSES - 1 }, (_, index) =>
      answerOf('s'.repeat(8 << 20), `"s${index}"`),
    );
    const stalledReaders = stalled.map((answer) => answer.open(undefined));
    try {
      const text = `[${'"pin",'.repeat(600_000)}"last"]`;
      expect(await received(answerOf(text, '"other"').open(undefined))).toBe(text);
    } finally {
      for (const reader of stalledReaders) reader.destroy();
    }
  }, 10_000);

  it('begins a pass once the readers that take nothing of as many passes as may be open are let go', async () => {
    const stalledReaders = Array.from({ length: OPEN_PASSES }, (_, index) =>
      answerOf('s'.repeat(4 << 20), `"t${index}"`).open(undefined, 300),
    );
    for (const reader of stalledReaders) reader.on('error', () => {});
    const startedAt = performance.now();
    const text = 'w'.repeat(2 << 20);
    expect(await received(answerOf(text, '"after"').open(undefined))).toBe(text);
    expect(performance.now() - startedAt).toBeGreaterThanOrEqual(300);
    for (const reader of stalledReaders) expect(reader.destroyed).toBe(true);
  }, 10_000);

  it('lets go, while a pass waits to begin, a reader that keeps its pass waiting a second, and not one that reads steadily', async () => {
    // Every pass that may be open has a reader that takes nothing, and no request timeout, but one whose
    // reader takes a block every 20 ms: the pass asked for next waits to begin.
    const stalledReaders = Array.from({ length: OPEN_PASSES - 1 }, (_, index) =>
      answerOf('s'.repeat(4 << 20), `"c${index}"`).open(undefined),
    );
    const failures: string[] = [];
    for (const reader of stalledReaders) reader.on('error', (error) => failures.push(error.message));
    const steadyText = 'q'.repeat(24 << 20);
    const steady = (async () => {
      const chunks: Buffer[] = [];
      for await (const chunk of answerOf(steadyText, '"steady-crowded"').open(undefined)) {
        chunks.push(chunk as Buffer);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      return Buffer.concat(chunks).toString();
    })();
    try {
      // Each of them waits for its reader by now: only their being told of the next pass lets one go.
      await new Promise((resolve) => setTimeout(resolve, 500));
      const startedAt = performance.now();
      const text = 'w'.repeat(2 << 20);
      expect(await received(answerOf(text, '"crowded"').open(undefined))).toBe(text);
      const waited = performance.now() - startedAt;
      expect(waited).toBeGreaterThanOrEqual(CROWDED_WAIT_MS - 50);
      expect(waited).toBeLessThan(CROWDED_WAIT_MS + 2_000);
      // One let go makes room for it; the others, no pass waiting to begin any more, are waited for.
      expect(failures).toEqual([
        `the client kept its answer waiting ${CROWDED_WAIT_MS} ms while another waited to begin`,
      ]);
      expect(stalledReaders.filter((reader) => reader.destroyed)).toHaveLength(1);
      expect(await steady).toBe(steadyText);
    } finally {
      for (const reader of stalledReaders) reader.destroy();
    }
  }, 20_000);

  it('lets no reader go for a pass that waited to begin and whose reader left', async () => {
    const stalledReaders = Array.from({ length: OPEN_PASSES }, (_, index) =>
      answerOf('s'.repeat(4 << 20), `"g${index}"`).open(undefined),
    );
    try {
      await new Promise((resolve) => setTimeout(resolve, 300));
      const gone = answerOf('g'.repeat(2 << 20), '"gone"').open(undefined);
      await new Promise((resolve) => setTimeout(resolve, 200));
      gone.destroy();
      await new Promise((resolve) => setTimeout(resolve, CROWDED_WAIT_MS + 300));
      expect(stalledReaders.filter((reader) => reader.destroyed)).toEqual([]);
    } finally {
      for (const reader of stalledReaders) reader.destroy();
    }
  }, 10_000);

  it('waits, with no pass waiting to begin, for a reader that takes nothing, as long as its time', async () => {
    const text = 'u'.repeat(4 << 20);
    const answer = answerOf(text, '"uncrowded"');
    const stalledReader = answer.open(undefined);
    const reader = answer.open(undefined);
    const whole = received(reader);
    await new Promise((resolve) => setTimeout(resolve, CROWDED_WAIT_MS + 500));
    expect(stalledReader.destroyed).toBe(false);
    expect(reader.readableEnded).toBe(false);
    stalledReader.destroy();
    expect(await whole).toBe(text);
  }, 10_000);

  it('lets go a reader that takes nothing for its time, and sends the others of its pass the rest', async () => {
    const text = 'y'.repeat(6 << 20);
    const answer = answerOf(text, '"stalled"');
    const stalledReader = answer.open(undefined, 200);
    const failed = new Promise<Error>((resolve) => stalledReader.once('error', resolve));
    const startedAt = performance.now();
    expect(await received(answer.open(undefined, 200))).toBe(text);
    expect(performance.now() - startedAt).toBeGreaterThanOrEqual(200);
    expect((await failed).message).toMatch(/took nothing of the answer for 200 ms/);
  }, 10_000);

  it('lets go a reader of a compressed pass that takes nothing, and the others are sent the rest', async () => {
    const text = JSON.stringify(
      Array.from({ length: 200_000 }, (_, i) => ({ i, h: ((i * 2654435761) >>> 0).toString(36) })),
    );
    for (const encoding of ['br', 'gzip'] as const) {
      const answer = answerOf(text, `"${encoding}"`);
      const stalledReader = answer.open(encoding, 200);
      const failed = new Promise<Error>((resolve) => stalledReader.once('error', resolve));
      const chunks: Buffer[] = [];
      for await (const chunk of answer.open(encoding, 200)) chunks.push(chunk as Buffer);
      const body = Buffer.concat(chunks);
      expect((encoding === 'br' ? zlib.brotliDecompressSync(body) : zlib.gunzipSync(body)).toString()).toBe(
        text,
      );
      expect((await failed).message).toMatch(/took nothing/);
    }
  }, 10_000);

  it('gives back the turns of passes whose reading fails', async () => {
    const failing = Array.from({ length: OPEN_PASSES + 4 }, (_, index) => {
      const answer = new SharedStream(`"f${index}"`, 0, async function* () {
        yield Buffer.from('[');
        throw new Error('storage failed');
      });
      return received(answer.open(undefined)).then(
        () => new Error('sent whole'),
        (error: Error) => error,
      );
    });
    for (const failed of await Promise.all(failing)) expect(failed.message).toBe('storage failed');
    const text = 'v'.repeat(1 << 20);
    expect(await received(answerOf(text, '"good"').open(undefined))).toBe(text);
  }, 10_000);

  it('waits for a reader that takes its blocks slowly but steadily', async () => {
    const text = 'z'.repeat(3 << 20);
    const answer = answerOf(text, '"steady"');
    const slow = answer.open(undefined, 300);
    const fast = received(answer.open(undefined, 300));
    const chunks: Buffer[] = [];
    // A block every 20 ms: the pass waits for it, each time for less than its 300 ms.
    for await (const chunk of slow) {
      chunks.push(chunk as Buffer);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    expect(Buffer.concat(chunks).toString()).toBe(text);
    expect(await fast).toBe(text);
  }, 10_000);

  it('goes on for every reader of a pass once its stalled reader goes', async () => {
    const text = 'x'.repeat(6 << 20);
    const answer = answerOf(text, '"shared"');
    const stalledReader = answer.open(undefined);
    const reader = answer.open(undefined);
    const whole = received(reader);
    // The pass waits for the stalled reader while it holds what it made ahead of it.
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(reader.readableEnded).toBe(false);
    stalledReader.destroy();
    expect(await whole).toBe(text);
  }, 10_000);
});
