import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  createOnly,
  matchHolds,
  noneMatchNames,
  noneMatchNamesState,
  parseEntityTags,
  representationTag,
} from '../../src/http/conditional.js';

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

  it('D29: If-Match takes the tag of any encoding of the current state, strongly; nothing else derived from it', () => {
    expect(representationTag('rAbc')).toBe('"rAbc"');
    expect(representationTag('rAbc', 'br')).toBe('"rAbc-br"');
    expect(representationTag('rAbc', 'gzip')).toBe('"rAbc-gzip"');
    for (const sent of ['"rAbc"', '"rAbc-br"', '"rAbc-gzip"', '"x", "rAbc-br"']) {
      expect(matchHolds(sent, '"rAbc"'), sent).toBe(true);
    }
    for (const sent of [
      'W/"rAbc-br"',
      '"rAbc-deflate"',
      '"rAbc-br-br"',
      '"rAb"',
      '"rAbc-"',
      '"rAbc,rAbc-br"',
    ]) {
      expect(matchHolds(sent, '"rAbc"'), sent).toBe(false);
    }
    // A tag that itself ends like an encoding's is matched as a whole, never cut.
    expect(matchHolds('"rAb-br"', '"rAb-br"')).toBe(true);
    expect(matchHolds('"rAb"', '"rAb-br"')).toBe(false);
  });

  it("D29: a write's If-None-Match names the current state in any encoding, weakly", () => {
    for (const sent of ['"rAbc"', 'W/"rAbc-gzip"', '"x", "rAbc-br"', '*']) {
      expect(noneMatchNamesState(sent, '"rAbc"'), sent).toBe(true);
    }
    for (const sent of ['"rAb"', '"rAbc-zstd"', 'rAbc']) {
      expect(noneMatchNamesState(sent, '"rAbc"'), sent).toBe(false);
    }
    // A read's If-None-Match names only the representation it would send.
    expect(noneMatchNames('"rAbc-br"', '"rAbc"')).toBe(false);
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
