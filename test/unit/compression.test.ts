import { randomBytes } from 'node:crypto';
import zlib from 'node:zlib';
import { describe, expect, it, vi } from 'vitest';
import { Answer, POOL_COMPRESSIONS } from '../../src/http/answer.js';

/** How many compressions are on libuv's pool now, and the most there were at once. */
const pool = vi.hoisted(() => ({ now: 0, most: 0, started: 0 }));

// Node's own zlib, with its pool compressions counted as they start and end.
vi.mock('node:zlib', async (importOriginal) => {
  const actual = (await importOriginal<{ default: typeof zlib }>()).default;
  type Done = (error: Error | null, result: Buffer) => void;
  // Called as (body, options, done) or, without options, as (body, done).
  const counted =
    (compress: (body: Buffer, options: object, done: Done) => void) =>
    (body: Buffer, ...rest: [object, Done] | [Done]) => {
      const [options, done] = rest.length === 2 ? rest : [{}, rest[0]];
      pool.started++;
      pool.most = Math.max(pool.most, ++pool.now);
      compress(body, options, (error, result) => {
        pool.now--;
        done(error, result);
      });
    };
  const wrapped = {
    ...actual,
    brotliCompress: counted(actual.brotliCompress),
    gzip: counted(actual.gzip),
  };
  return { ...wrapped, default: wrapped };
});

/** JSON text of about `bytes` bytes that compresses as real answers do: repeated shape, varied values. */
function jsonOf(bytes: number): Buffer {
  const items: string[] = [];
  let size = 0;
  for (let i = 0; size < bytes; i++) {
    const item = JSON.stringify({
      id: randomBytes(16).toString('hex'),
      slug: `resource-${i}`,
      title: `T${i}`,
    });
    items.push(item);
    size += item.length + 1;
  }
  return Buffer.from(`[${items.join(',')}]`);
}

const decoders = { br: zlib.brotliDecompressSync, gzip: zlib.gunzipSync } as const;

describe('Answer.encoded (D19)', () => {
  it.each([
    ['a small body, compressed on the request thread', 40 * 1024, false],
    ['a large body, compressed on the pool', 600 * 1024, true],
  ])('%s decodes to the body in both encodings, made once', async (_name, bytes, onPool) => {
    const body = jsonOf(bytes);
    const answer = new Answer(body);
    const started = pool.started;
    for (const encoding of ['br', 'gzip'] as const) {
      const made = answer.encoded(encoding);
      expect(made instanceof Promise).toBe(onPool);
      const first = await made;
      expect(decoders[encoding](first).equals(body)).toBe(true);
      expect(first.length).toBeLessThan(body.length);
      // Kept: the same bytes, not compressed again.
      expect(answer.encoded(encoding)).toBe(first);
    }
    expect(pool.started - started).toBe(onPool ? 2 : 0);
    expect(answer.bytes).toBe(
      body.length + (answer.encoded('br') as Buffer).length + (answer.encoded('gzip') as Buffer).length,
    );
  });

  it('compresses many large answers asked for at once, each right and once, a few at a time', async () => {
    const answers = Array.from({ length: 8 }, () => new Answer(jsonOf(300 * 1024)));
    pool.most = 0;
    const started = pool.started;
    // Every request for the same answer while it is being made shares the one compression.
    const asked = answers.flatMap((answer) => [answer.encoded('br'), answer.encoded('br')]);
    expect(asked[0]).toBe(asked[1]);
    const made = await Promise.all(asked);
    answers.forEach((answer, i) => {
      expect(zlib.brotliDecompressSync(made[2 * i]!).equals(answer.body)).toBe(true);
    });
    expect(pool.started - started).toBe(answers.length);
    expect(pool.most).toBe(POOL_COMPRESSIONS);
    expect(POOL_COMPRESSIONS).toBeGreaterThanOrEqual(1);
    expect(POOL_COMPRESSIONS).toBeLessThanOrEqual(4);
  });

  it('goes on compressing after a compression fails', async () => {
    const failing = new Answer(jsonOf(300 * 1024));
    // A body that is no Buffer makes zlib throw when the compression is started on the pool.
    Object.defineProperty(failing, 'body', { value: { length: 300 * 1024 } });
    await expect(failing.encoded('gzip')).rejects.toThrow();
    const next = new Answer(jsonOf(300 * 1024));
    expect(zlib.gunzipSync(await next.encoded('gzip')).equals(next.body)).toBe(true);
  });
});
