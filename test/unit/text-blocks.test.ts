import zlib from 'node:zlib';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  BLOCK_BYTES,
  blocksOf,
  compressLikeStream,
  RUN_BYTES,
  StreamedAnswer,
} from '../../src/http/streamed-answer.js';

async function* each(parts: readonly string[]): AsyncGenerator<string> {
  yield* parts;
}

async function blocks(parts: readonly string[], blockBytes?: number): Promise<Buffer[]> {
  const made: Buffer[] = [];
  // Copied: a block is the reader's to keep once yielded.
  for await (const block of blocksOf(each(parts), blockBytes)) made.push(Buffer.from(block));
  return made;
}

/** `text` cut into parts at the code point boundaries `cuts` fall on, as stored parts are cut. */
function cutAt(text: string, cuts: readonly number[]): string[] {
  const points = [...text];
  const at = [...new Set(cuts.map((cut) => cut % (points.length + 1)))].sort((a, b) => a - b);
  const parts: string[] = [];
  let from = 0;
  for (const to of [...at, points.length]) {
    parts.push(points.slice(from, to).join(''));
    from = to;
  }
  return parts;
}

function expectBlocksOf(made: readonly Buffer[], text: string, blockBytes = BLOCK_BYTES): void {
  expect(Buffer.concat(made).equals(Buffer.from(text))).toBe(true);
  for (const block of made.slice(0, -1)) expect(block.length).toBe(blockBytes);
  expect(made.at(-1)?.length ?? 1).toBeGreaterThan(0);
}

describe('the blocks of a streamed answer (D30)', () => {
  it.each([
    ['a two-byte character', 'é', 1],
    ['a three-byte character', '€', 1],
    ['a four-byte character', '😀', 2],
    ['a lone surrogate', '\ud800', 1],
  ])(
    'cuts %s that does not fit between two blocks, as the bytes of the whole text are cut',
    async (_name, character, units) => {
      for (let before = BLOCK_BYTES - 3; before <= BLOCK_BYTES; before++) {
        const text = `${'a'.repeat(before)}${character}${'b'.repeat(10)}${character.repeat(BLOCK_BYTES)}`;
        expect(text.length).toBe(before + units + 10 + units * BLOCK_BYTES);
        expectBlocksOf(await blocks([text]), text);
        expectBlocksOf(await blocks(cutAt(text, [before, before + 1, BLOCK_BYTES])), text);
      }
    },
  );

  it('makes, from any text in any parts, full blocks of its bytes but the last', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.string({ unit: 'binary', maxLength: 2000, size: 'max' }), { minLength: 1, maxLength: 4 }),
        fc.integer({ min: 0, max: 80 }),
        fc.array(fc.nat(), { maxLength: 6 }),
        async (pieces, repeats, cuts) => {
          const text = pieces.join('').repeat(repeats);
          const made = await blocks(cutAt(text, cuts));
          if (text.length === 0) expect(made).toEqual([]);
          else expectBlocksOf(made, text);
        },
      ),
      { numRuns: 60 },
    );
  });

  it('makes blocks of the size asked for, any from four bytes (what a character takes at most)', async () => {
    // A compressed pass cuts its text in blocks of another size than the identity pass.
    await fc.assert(
      fc.asyncProperty(
        fc.string({ unit: 'binary', maxLength: 400, size: 'max' }),
        fc.integer({ min: 4, max: 70 }),
        fc.array(fc.nat(), { maxLength: 6 }),
        async (text, blockBytes, cuts) => {
          const made = await blocks(cutAt(text, cuts), blockBytes);
          if (text.length === 0) expect(made).toEqual([]);
          else expectBlocksOf(made, text, blockBytes);
        },
      ),
      { numRuns: 200 },
    );
  });

  it('compresses an answer written as it is read to the bytes of the same answer held whole, in br and gzip', async () => {
    // Several runs of blocks written to the compressor, the last one short, with characters of every width.
    const text = JSON.stringify(
      Array.from({ length: 40_000 }, (_, i) => ({
        i,
        ref: `org/c/r-${i}-é-€-😀`,
        h: ((i * 2654435761) >>> 0).toString(16),
      })),
    );
    const body = Buffer.from(text);
    expect(body.length).toBeGreaterThan(2 * RUN_BYTES + 1);
    for (const encoding of ['br', 'gzip'] as const) {
      const held = await compressLikeStream(encoding, body);
      const answer = new StreamedAnswer('"tag"', 0, (blockBytes) =>
        blocksOf(each(cutAt(text, [1, 70_000, 300_001])), blockBytes),
      );
      const parts: Buffer[] = [];
      for await (const part of answer.open(encoding)) parts.push(part as Buffer);
      const streamed = Buffer.concat(parts);
      expect(streamed.equals(held)).toBe(true);
      const decompressed =
        encoding === 'br' ? zlib.brotliDecompressSync(streamed) : zlib.gunzipSync(streamed);
      expect(decompressed.equals(body)).toBe(true);
    }
  });
});
