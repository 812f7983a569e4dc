import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { createOnly, matchHolds, noneMatchNames, parseEntityTags } from '../../src/http/conditional.js';

/** RFC 9110 §8.8.3 and §13.1: entity-tag lists, strong comparison for If-Match, weak for If-None-Match. */
describe('conditional requests (RFC 9110)', () => {
  it('parses lists whose quoted tags hold commas and spaces around them, weak and strong', () => {
    expect(parseEntityTags('"a"')).toEqual([{ weak: false, opaque: '"a"' }]);
    expect(parseEntityTags(' W/"a" ,"b,c",, "" ')).toEqual([
      { weak: true, opaque: '"a"' },
      { weak: false, opaque: '"b,c"' },
      { weak: false, opaque: '""' },
    ]);
    expect(parseEntityTags('*')).toBe('*');
    expect(parseEntityTags(' * ')).toBe('*');
  });

  it('refuses what is not an entity-tag list: bare tokens, unclosed quotes, junk between tags, a star in a list', () => {
    for (const value of [
      'a',
      '"a',
      '"a" "b"',
      '"a";q=1',
      'w/"a"',
      '"a b"',
      '"a"x',
      '*, "a"',
      '',
      ' , ',
      '"\u0001"',
    ]) {
      expect(parseEntityTags(value), value).toBeUndefined();
    }
  });

  it('If-None-Match compares weakly: a weak or strong form of the tag names it, and a comma inside a tag splits nothing', () => {
    expect(noneMatchNames('"abc"', '"abc"')).toBe(true);
    expect(noneMatchNames('W/"abc"', '"abc"')).toBe(true);
    expect(noneMatchNames('"x", W/"abc"', '"abc"')).toBe(true);
    expect(noneMatchNames('*', '"abc"')).toBe(true);
    expect(noneMatchNames('"a,b"', '"a,b"')).toBe(true);
    expect(noneMatchNames('"a,b"', '"a"')).toBe(false);
    expect(noneMatchNames('"abcd"', '"abc"')).toBe(false);
    expect(noneMatchNames(undefined, '"abc"')).toBe(false);
    expect(noneMatchNames('abc', '"abc"')).toBe(false);
  });

  it('If-Match compares strongly: a weak tag never holds, `*` holds only when something exists', () => {
    expect(matchHolds('"abc"', '"abc"')).toBe(true);
    expect(matchHolds('"x", "abc"', '"abc"')).toBe(true);
    expect(matchHolds('W/"abc"', '"abc"')).toBe(false);
    expect(matchHolds('"abc"', 'W/"abc"')).toBe(false);
    expect(matchHolds('*', '"abc"')).toBe(true);
    expect(matchHolds('*', undefined)).toBe(false);
    expect(matchHolds('"abc"', undefined)).toBe(false);
    expect(matchHolds('"abc', '"abc"')).toBe(false);
  });

  it('If-None-Match: * alone makes a write create-only', () => {
    expect(createOnly('*')).toBe(true);
    expect(createOnly(' * ')).toBe(true);
    expect(createOnly('"a"')).toBe(false);
    expect(createOnly(undefined)).toBe(false);
  });

  it('any list of tags written out is parsed back to the same tags', () => {
    const etagc = fc.stringMatching(/^[\x21\x23-\x7e]{0,12}$/);
    const tag = fc.record({ weak: fc.boolean(), opaque: etagc.map((text) => `"${text}"`) });
    fc.assert(
      fc.property(
        fc.array(tag, { minLength: 1, maxLength: 6 }),
        fc.constantFrom(',', ', ', ' ,\t'),
        (tags, sep) => {
          const header = tags.map((t) => `${t.weak ? 'W/' : ''}${t.opaque}`).join(sep);
          expect(parseEntityTags(header)).toEqual(tags);
        },
      ),
      { numRuns: 2000 },
    );
  });
});
