import { describe, expect, it } from 'vitest';
import { blocksOf, SharedStream } from '../../src/http/shared-stream.js';

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
  it('lets a reader that takes nothing hold up its own pass only, however many there are', async () => {
    // More passes than may read storage at once, each with a reader that takes nothing: each makes
    // what it may make ahead of its reader, then waits for it.
    const stalled = Array.from({ length: 6 }, (_, index) => answerOf('s'.repeat(8 << 20), `"s${index}"`));
    const stalledReaders = stalled.map((answer) => answer.open(undefined));
    try {
      const text = `[${'"pin",'.repeat(600_000)}"last"]`;
      expect(await received(answerOf(text, '"other"').open(undefined))).toBe(text);
    } finally {
      for (const reader of stalledReaders) reader.destroy();
    }
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
