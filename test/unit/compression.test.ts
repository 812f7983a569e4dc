import { randomBytes } from 'node:crypto';
import zlib from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { Answer, oneAtATime } from '../../src/http/answer.js';

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

describe('oneAtATime', () => {
  it('starts each task once the one before has settled, in the order given', async () => {
    const lane = oneAtATime();
    let running = 0;
    let most = 0;
    const started: number[] = [];
    const task = (n: number) => async () => {
      started.push(n);
      running++;
      most = Math.max(most, running);
      await new Promise((resolve) => setTimeout(resolve, 5));
      running--;
      return n;
    };
    const results = await Promise.all([1, 2, 3, 4].map((n) => lane(task(n))));
    expect(results).toEqual([1, 2, 3, 4]);
    expect(started).toEqual([1, 2, 3, 4]);
    expect(most).toBe(1);
  });

  it('goes on after a task fails, and hands the failure to that task alone', async () => {
    const lane = oneAtATime();
    const failing = lane(async () => {
      throw new Error('no');
    });
    const next = lane(async () => 'yes');
    await expect(failing).rejects.toThrow('no');
    await expect(next).resolves.toBe('yes');
  });
});

describe('Answer.encoded (D19)', () => {
  it.each([
    ['a small body, compressed on the request thread', 40 * 1024],
    ['a large body, compressed on the pool', 600 * 1024],
  ])('%s decodes to the body in both encodings, made once', async (_name, bytes) => {
    const body = jsonOf(bytes);
    const answer = new Answer(body);
    for (const encoding of ['br', 'gzip'] as const) {
      const first = await answer.encoded(encoding);
      expect(decoders[encoding](first).equals(body)).toBe(true);
      expect(first.length).toBeLessThan(body.length);
      // Kept: the same bytes, not compressed again.
      expect(answer.encoded(encoding)).toBe(first);
    }
    expect(answer.bytes).toBe(
      body.length + (answer.encoded('br') as Buffer).length + (answer.encoded('gzip') as Buffer).length,
    );
  });

  it('compresses many large answers asked for at once, each right, each once', async () => {
    const answers = Array.from({ length: 6 }, () => new Answer(jsonOf(300 * 1024)));
    // Every request for the same answer while it is being made shares the one compression.
    const asked = answers.flatMap((answer) => [answer.encoded('br'), answer.encoded('br')]);
    expect(asked[0]).toBe(asked[1]);
    const made = await Promise.all(asked);
    answers.forEach((answer, i) => {
      expect(zlib.brotliDecompressSync(made[2 * i]!).equals(answer.body)).toBe(true);
    });
  });
});
