import { describe, expect, it } from 'vitest';
import { BLOCK_BYTES, blocksOf, StreamedAnswer } from '../../src/http/streamed-answer.js';

/** What a stream's source did: the blocks it made, and whether it was ended (its `finally` ran). */
interface Source {
  made: number;
  ended: boolean;
}

/** An answer of `text`, made in parts of 64 Ki characters as stored pins are read, its source watched. */
function answerOf(text: string, source: Source = { made: 0, ended: false }): StreamedAnswer {
  const parts: string[] = [];
  for (let at = 0; at < text.length; at += 65_536) parts.push(text.slice(at, at + 65_536));
  async function* read(): AsyncGenerator<string> {
    try {
      for (const part of parts) {
        source.made++;
        yield part;
      }
    } finally {
      source.ended = true;
    }
  }
  return new StreamedAnswer('"tag"', 0, (blockBytes) => blocksOf(read(), blockBytes));
}

async function received(body: NodeJS.ReadableStream): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of body) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString();
}

/** Resolves once `predicate` holds, checked at every turn of the event loop. */
async function until(predicate: () => boolean): Promise<void> {
  while (!predicate()) await new Promise((resolve) => setImmediate(resolve));
}

describe('answers written as they are read, a stream per request (D30, D20)', () => {
  it('sends each request the whole body, in blocks of at most 64 KiB, whatever the others do', async () => {
    const text = `[${'"pin",'.repeat(600_000)}"last"]`;
    const stalled = answerOf('s'.repeat(8 << 20)).open(undefined);
    try {
      const stream = answerOf(text).open(undefined);
      const chunks: Buffer[] = [];
      for await (const chunk of stream) chunks.push(chunk as Buffer);
      expect(Buffer.concat(chunks).toString()).toBe(text);
      for (const chunk of chunks) expect(chunk.length).toBeLessThanOrEqual(BLOCK_BYTES);
    } finally {
      stalled.destroy();
    }
  });

  it('reads storage no further than its reader takes, and stops reading it when the stream is destroyed', async () => {
    const source: Source = { made: 0, ended: false };
    const stream = answerOf('x'.repeat(64 << 20), source).open(undefined);
    let taken = 0;
    for await (const _chunk of stream) {
      if (++taken === 3) break;
    }
    await until(() => source.ended);
    // A few blocks ahead of the reader at most, of the thousand the body holds.
    expect(source.made).toBeLessThan(16);
  });

  it('reads no further than a compressor takes, and stops when the compressed stream is destroyed', async () => {
    const source: Source = { made: 0, ended: false };
    const stream = answerOf('y'.repeat(64 << 20), source).open('gzip');
    for await (const _chunk of stream) break;
    await until(() => source.ended);
    expect(source.made).toBeLessThan(64);
  });

  it('ends, with an error, the stream of a reader that takes nothing for its time, and stops reading storage', async () => {
    const source: Source = { made: 0, ended: false };
    const stream = answerOf('z'.repeat(8 << 20), source).open('br', 200);
    const failed = new Promise<Error>((resolve) => stream.on('error', resolve));
    expect((await failed).message).toBe('the client took nothing for 200 ms');
    await until(() => source.ended);
    expect(stream.destroyed).toBe(true);
  });

  it('waits for a reader that takes its blocks slowly but steadily, longer than its time in all', async () => {
    const text = 'w'.repeat(24 * BLOCK_BYTES);
    const stream = answerOf(text).open(undefined, 100);
    const chunks: Buffer[] = [];
    for await (const chunk of stream) {
      chunks.push(chunk as Buffer);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    expect(Buffer.concat(chunks).toString()).toBe(text);
  });

  it('fails the stream when reading storage fails', async () => {
    async function* failing(): AsyncGenerator<Buffer> {
      yield Buffer.from('[');
      throw new Error('storage is out of reach');
    }
    const stream = new StreamedAnswer('"tag"', 0, () => failing()).open('gzip');
    await expect(received(stream)).rejects.toThrow('storage is out of reach');
  });
});
