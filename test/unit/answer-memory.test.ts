import { describe, expect, it } from 'vitest';
import { Answer } from '../../src/http/answer.js';

/**
 * D30: what an answer kept in memory holds is what the answers' budget counts it as. A Buffer keeps
 * its whole backing memory alive, not only its own bytes: a small one made by `Buffer.from` is a slice
 * of an 8 KiB slab, and zlib's output a slice of its 16 KiB chunk.
 */

/** A Resource detail's JSON of about 2 KB, the size most kept answers have. */
function detailText(): string {
  return JSON.stringify({
    id: '01940000-0000-7001-8000-000000000001',
    slug: 'incident-response',
    title: 'Incident response',
    description: 'What to do first when something breaks, and who to tell.',
    content: Array.from({ length: 30 }, (_, i) => `Step ${i}: check the ${i}th thing.`).join('\n'),
  });
}

/** The memory `bytes` keeps alive. */
const held = (bytes: Buffer) => bytes.buffer.byteLength;

describe('an answer kept in memory (D30)', () => {
  it('a small body and its br and gzip forms each hold exactly their own bytes', async () => {
    const answer = Answer.json(detailText());
    expect(answer.body.length).toBeLessThan(4096);
    const br = await answer.encoded('br');
    const gzip = await answer.encoded('gzip');
    for (const bytes of [answer.body, br, gzip]) expect(held(bytes)).toBe(bytes.length);
    // What the budget counts is all it holds.
    expect(answer.bytes).toBe(held(answer.body) + held(br) + held(gzip));
  });

  it("a small JSON text's body is its UTF-8 bytes, in memory of exactly their size", () => {
    // Characters of two, three and four bytes: the body is sized by bytes, not by characters.
    for (const text of ['{"t":"Hand 😀 book 🧭, café, €"}', '{}', '']) {
      const { body } = Answer.json(text);
      expect(body.equals(Buffer.from(text))).toBe(true);
      expect(body.buffer.byteLength).toBe(body.length);
      expect(body.byteOffset).toBe(0);
    }
  });

  it('a body handed over as a slice of a larger buffer is kept without the rest of it', () => {
    const large = Buffer.alloc(64 * 1024, 'x');
    const answer = new Answer(large.subarray(0, 1000));
    expect(answer.body.length).toBe(1000);
    expect(held(answer.body)).toBe(1000);
    expect(answer.body.equals(large.subarray(0, 1000))).toBe(true);
  });

  it('a body that owns its memory is kept as it is, not copied', () => {
    const body = Buffer.alloc(10_000, 'y');
    expect(new Answer(body).body).toBe(body);
  });
});
