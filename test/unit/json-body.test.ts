import { Readable } from 'node:stream';
import fc from 'fast-check';
import type { FastifyRequest } from 'fastify';
import { describe, expect, it } from 'vitest';
import { InputError } from '../../src/foundation/errors.js';
import { MAX_JSON_DEPTH, parseJsonBody, streamedJsonBodyParser } from '../../src/http/json-body.js';

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

/** What the streamed parser reads of a request: its headers and its route's body limit. */
function requestOf(headers: Record<string, string>, bodyLimit = 1 << 20): FastifyRequest {
  return { headers, routeOptions: { bodyLimit } } as unknown as FastifyRequest;
}

/** `bytes` cut into parts at `cuts` (byte offsets), as the network may deliver them. */
function partsOf(bytes: Buffer, cuts: readonly number[]): Buffer[] {
  const at = [...new Set(cuts.map((cut) => cut % (bytes.length + 1)))].sort((a, b) => a - b);
  const parts: Buffer[] = [];
  let from = 0;
  for (const cut of [...at, bytes.length]) {
    if (cut > from) parts.push(bytes.subarray(from, cut));
    from = cut;
  }
  return parts;
}

function streamed(parts: readonly Buffer[], headers: Record<string, string> = {}, bodyLimit?: number) {
  const length = parts.reduce((sum, part) => sum + part.length, 0);
  return streamedJsonBodyParser(
    requestOf({ 'content-length': String(length), ...headers }, bodyLimit),
    Readable.from(parts, { objectMode: false }),
  );
}

async function refusalOf(promise: Promise<unknown>): Promise<Error & { code?: string; statusCode?: number }> {
  try {
    await promise;
  } catch (error) {
    return error as Error & { code?: string; statusCode?: number };
  }
  throw new Error('expected the body to be refused');
}

/** The problems of a refusal that must be a 400 of the body. */
function problemsOf(refusal: unknown) {
  expect(refusal).toBeInstanceOf(InputError);
  return (refusal as InputError).problems;
}

describe('JSON bodies read as they arrive (D20, D21)', () => {
  it('reads what JSON.parse reads wherever the network cuts the body, inside characters too', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.jsonValue({ maxDepth: 6 }),
        fc.array(fc.nat(), { maxLength: 12 }),
        async (value, cuts) => {
          const text = JSON.stringify({ value, text: 'ü✓😀' });
          expect(await streamed(partsOf(Buffer.from(text, 'utf8'), cuts))).toStrictEqual(JSON.parse(text));
        },
      ),
      { numRuns: 300 },
    );
    // Every cut inside a four-byte character, and parts of one byte each.
    const bytes = Buffer.from('{"a":"😀"}', 'utf8');
    for (let cut = 1; cut < bytes.length; cut++) {
      expect(await streamed(partsOf(bytes, [cut]))).toEqual({ a: '😀' });
    }
    expect(await streamed([...bytes].map((byte) => Buffer.from([byte])))).toEqual({ a: '😀' });
    expect(await streamed([])).toBeUndefined();
  });

  it('refuses bytes that are not UTF-8 in any part, across parts, or cut short at the end', async () => {
    const wrong = [
      // A byte that is never UTF-8, in the second part.
      [Buffer.from('{"a":"b'), Buffer.from([0xff]), Buffer.from('"}')],
      // A character's first byte, then a part that does not continue it.
      [Buffer.from('{"a":"'), Buffer.from([0xe2]), Buffer.from('"}')],
      // A four-byte character cut short by the end of the body.
      [Buffer.from('{"a":"'), Buffer.from([0xf0, 0x9f, 0x98])],
      // An overlong encoding, split across two parts.
      [Buffer.from('{"a":"'), Buffer.from([0xc0]), Buffer.from([0xaf, 0x22, 0x7d])],
    ];
    for (const parts of wrong) {
      expect(problemsOf(await refusalOf(streamed(parts)))).toEqual([
        { in: 'body', name: '(body)', message: 'must be UTF-8' },
      ]);
    }
    // Not UTF-8 is said first even when the text is not JSON either: no byte is parsed before all are checked.
    const both = await refusalOf(streamed([Buffer.from('{{{'), Buffer.from([0xff])]));
    expect(problemsOf(both)[0]).toMatchObject({ message: 'must be UTF-8' });
  });

  it("keeps Fastify's limits: 413 past the route's limit by Content-Length or as it arrives, 400 for a wrong length", async () => {
    const part = Buffer.from(`[${'1,'.repeat(600)}1]`);
    // Declared too large: refused before a byte is read.
    const unread = Readable.from([part]);
    const declared = await refusalOf(
      streamedJsonBodyParser(requestOf({ 'content-length': '5000' }, 1000), unread),
    );
    expect(declared.code).toBe('FST_ERR_CTP_BODY_TOO_LARGE');
    expect(unread.readableDidRead).toBe(false);
    // No length declared (chunked): refused once the parts pass the limit.
    const chunked = streamedJsonBodyParser(requestOf({}, 1000), Readable.from([part, part]));
    expect((await refusalOf(chunked)).code).toBe('FST_ERR_CTP_BODY_TOO_LARGE');
    // A body shorter or longer than its Content-Length.
    for (const length of [part.length - 1, part.length + 1]) {
      const mismatch = streamedJsonBodyParser(
        requestOf({ 'content-length': String(length) }),
        Readable.from([part]),
      );
      expect((await refusalOf(mismatch)).code).toBe('FST_ERR_CTP_INVALID_CONTENT_LENGTH');
    }
    // A charset other than UTF-8 is 415 before anything is read.
    const latin = await refusalOf(
      streamedJsonBodyParser(
        requestOf({ 'content-type': 'application/json; charset=latin1' }),
        Readable.from([part]),
      ),
    );
    expect(latin.message).toMatch(/not in latin1/);
    // Within the limit, the same body is read.
    expect(await streamed([part], {}, part.length)).toHaveLength(601);
  });

  it('a stream that fails is a 400 of its own error', async () => {
    const failing = new Readable({
      read() {
        this.destroy(new Error('the client went away'));
      },
    });
    const refusal = await refusalOf(streamedJsonBodyParser(requestOf({}), failing));
    expect(refusal.message).toBe('the client went away');
    expect(refusal.statusCode).toBe(400);
  });
});
