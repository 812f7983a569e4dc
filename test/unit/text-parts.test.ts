import { describe, expect, it } from 'vitest';
import { partEnd, textParts } from '../../src/foundation/text-parts.js';

/** D30: a text stored in parts is cut so that each part is well-formed text on its own. */
describe('textParts', () => {
  it('cuts at the size, the last part shorter, and joins back to the text', () => {
    expect(textParts('abcde', 2)).toEqual(['ab', 'cd', 'e']);
    expect(textParts('abcd', 2)).toEqual(['ab', 'cd']);
    expect(textParts('', 4)).toEqual(['']);
  });

  it('never cuts between the halves of a surrogate pair', () => {
    // 'a😀b': the pair is at 1-2; a cut at 2 would leave a lone high half.
    const parts = textParts('a😀b😀😀c', 2);
    expect(parts).toEqual(['a', '😀', 'b', '😀', '😀', 'c']);
    expect(parts.every((part) => (part as string & { isWellFormed(): boolean }).isWellFormed())).toBe(true);
    expect(parts.join('')).toBe('a😀b😀😀c');
  });

  it('refuses a size that cannot hold a pair', () => {
    expect(() => textParts('abc', 1)).toThrow(RangeError);
  });
});

describe('partEnd', () => {
  it('ends a part at the size, or at the end of a text shorter than that', () => {
    expect(partEnd('abcdef', 0, 4)).toBe(4);
    expect(partEnd('abcdef', 3, 2)).toBe(5);
    // Exactly the size is left, or less: the part is the rest of the text.
    expect(partEnd('abcdef', 2, 4)).toBe(6);
    expect(partEnd('abcdef', 4, 4)).toBe(6);
    expect(partEnd('', 0, 4)).toBe(0);
  });

  it('ends a part one short where its last unit would be the first half of a pair', () => {
    // 'ab😀c': the pair is at 2-3.
    expect(partEnd('ab😀c', 0, 3)).toBe(2);
    expect(partEnd('ab😀c', 1, 2)).toBe(2);
    // A cut after the pair, or before it, stays where it is.
    expect(partEnd('ab😀c', 0, 4)).toBe(4);
    expect(partEnd('ab😀c', 0, 2)).toBe(2);
    // Two pairs in a row: a part of two holds one whole pair, never a half of each.
    expect(partEnd('😀😀', 0, 3)).toBe(2);
    expect(partEnd('😀😀', 2, 3)).toBe(4);
  });

  it("never moves a cut at the text's end, where no half can follow", () => {
    // What is known so far ends with a first half: its pair's second is still to come.
    expect(partEnd('ab\ud83d', 0, 3)).toBe(3);
    expect(partEnd('ab\ud83d', 0, 8)).toBe(3);
  });

  it('cuts the first part as textParts does, and textParts cuts every part with it', () => {
    const text = 'a😀b😀😀c'.repeat(3);
    for (const size of [2, 3, 4, 5]) {
      const parts = textParts(text, size);
      expect(text.slice(0, partEnd(text, 0, size))).toBe(parts[0]);
      let from = 0;
      for (const part of parts) {
        expect(text.slice(from, partEnd(text, from, size))).toBe(part);
        from += part.length;
      }
    }
  });

  it('refuses a size that cannot hold a pair', () => {
    expect(() => partEnd('abc', 0, 1)).toThrow(RangeError);
  });
});
