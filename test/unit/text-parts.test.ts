import { describe, expect, it } from 'vitest';
import { textParts } from '../../src/foundation/text-parts.js';

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
