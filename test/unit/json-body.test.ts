import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { InputError } from '../../src/foundation/errors.js';
import { MAX_JSON_DEPTH, parseJsonBody } from '../../src/http/json-body.js';

/**
 * The JSON body reader (D20, D21): the values JSON.parse makes, read a slice at a time; nesting past
 * 64 levels refused naming where, before any value is built; bytes that are not UTF-8 refused.
 */

const body = (text: string) => parseJsonBody(Buffer.from(text, 'utf8'));

async function problemOf(text: string | Buffer) {
  try {
    await parseJsonBody(typeof text === 'string' ? Buffer.from(text, 'utf8') : text);
  } catch (error) {
    expect(error).toBeInstanceOf(InputError);
    return (error as InputError).problems[0]!;
  }
  throw new Error('expected the body to be refused');
}

describe('JSON bodies', () => {
  it('reads what JSON.parse reads, value for value, at any size', async () => {
    await fc.assert(
      fc.asyncProperty(fc.jsonValue({ maxDepth: 8 }), async (value) => {
        const text = JSON.stringify(value);
        expect(await body(text)).toStrictEqual(JSON.parse(text));
      }),
      { numRuns: 400 },
    );
    // Larger than one slice: strings and numbers cut at slice edges, multi-byte characters too.
    const big = Array.from({ length: 30_000 }, (_, i) => ({ i: i * 1.5 - 7e3, s: `ü✓😀 "${i}"\\`, n: null }));
    expect(await body(JSON.stringify(big))).toStrictEqual(big);
  });

  it('__proto__ is a key like any other, and lone surrogates are kept for the text checks to refuse', async () => {
    const value = (await body('{"__proto__":{"polluted":true},"s":"\\ud800"}')) as Record<string, unknown>;
    expect(Object.getPrototypeOf(value)).toBe(Object.prototype);
    expect(Object.keys(value)).toEqual(['__proto__', 's']);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect(value.s).toBe('\ud800');
  });

  it(`takes ${MAX_JSON_DEPTH} levels and refuses ${MAX_JSON_DEPTH + 1}, naming the path to the deep part`, async () => {
    const levels = (n: number) => `${'['.repeat(n)}${']'.repeat(n)}`;
    await expect(body(levels(MAX_JSON_DEPTH))).resolves.toBeDefined();
    expect(await problemOf(levels(MAX_JSON_DEPTH + 1))).toEqual({
      in: 'body',
      name: '[0][0][0][0][0][0][0][0]…',
      message: 'nests deeper than 64 levels',
    });
    const deep = `{"resources":[{"slug":"a"},{"slug":"b","manifest":{"x":1,"a":${levels(70)}}}]}`;
    expect((await problemOf(deep)).name).toBe('resources[1].manifest.a[0][0][0][0]…');
    // Brackets and quotes inside strings are text, not nesting.
    const text = `{"a":"${'[{'.repeat(200)}\\"${'}]'.repeat(200)}","b":[]}`;
    await expect(body(text)).resolves.toMatchObject({ b: [] });
    // Nothing past the deep point is read: a body deep at its start is refused whatever follows.
    const garbageAfter = Buffer.concat([
      Buffer.from('['.repeat(MAX_JSON_DEPTH + 1)),
      Buffer.alloc(1 << 20, 0x20),
    ]);
    expect((await problemOf(garbageAfter)).message).toBe('nests deeper than 64 levels');
  });

  it('refuses bytes that are not UTF-8 and text that is not JSON, as 400s of the body', async () => {
    expect(await problemOf(Buffer.from([0x7b, 0x22, 0xff, 0x22, 0x3a, 0x31, 0x7d]))).toEqual({
      in: 'body',
      name: '(body)',
      message: 'must be UTF-8',
    });
    for (const text of ['{', '{"a":1,}', '[1 2]', 'nul', '{"a":1}{', '"unterminated', '{"a"}']) {
      const problem = await problemOf(text);
      expect(problem.name, text).toBe('(body)');
      expect(problem.message, text).toMatch(/^is not valid JSON \(/);
    }
    expect(await body('')).toBeUndefined();
  });
});
