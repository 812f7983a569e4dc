import { describe, expect, it } from 'vitest';
import { holdsAtMost } from '../../src/foundation/value-size.js';

/** The bounded measure of a value that decides whether work on it is done in one go (D20). */
describe('holdsAtMost', () => {
  it('counts keys and list elements at any depth, up to the bound and no further', () => {
    const nested = { a: [1, 2, { b: [3, 4] }], c: 'x' };
    // a, c; three elements of a; b; two elements of b: 8 parts.
    expect(holdsAtMost(nested, 8)).toBe(true);
    expect(holdsAtMost(nested, 7)).toBe(false);
    expect(holdsAtMost('text', 0)).toBe(true);
    expect(holdsAtMost(null, 0)).toBe(true);
  });

  it('refuses a long text when told to, and judges a million parts by the bound', () => {
    expect(holdsAtMost({ title: 'x'.repeat(11) }, 5, 10)).toBe(false);
    expect(holdsAtMost({ title: 'x'.repeat(10) }, 5, 10)).toBe(true);
    expect(holdsAtMost({ content: 'x'.repeat(1000) }, 5)).toBe(true);
    const wide = { list: Array.from({ length: 1_000_000 }, (_, i) => i) };
    expect(holdsAtMost(wide, 100)).toBe(false);
  });
});
