import { describe, expect, it } from 'vitest';
import { MemoryRateCounter } from '../../src/auth/rate-limits.js';

describe('MemoryRateCounter (D10)', () => {
  it('counts hits in a fixed window and starts again from zero once it closes', () => {
    let now = 1_000;
    const counter = new MemoryRateCounter(() => now);
    expect(counter.increment('k', 60_000)).toEqual({ count: 1, resetInMs: 60_000 });
    now += 15_000;
    expect(counter.increment('k', 60_000)).toEqual({ count: 2, resetInMs: 45_000 });
    expect(counter.increment('other', 60_000)).toEqual({ count: 1, resetInMs: 60_000 });
    now += 45_000; // the window of `k` has closed
    expect(counter.increment('k', 60_000)).toEqual({ count: 1, resetInMs: 60_000 });
  });

  it('forgets the least recently counted key past its size, never one still being counted', () => {
    let now = 0;
    const counter = new MemoryRateCounter(() => now, 2);
    counter.increment('busy', 60_000);
    counter.increment('idle', 60_000);
    now += 1;
    // Counting `busy` again makes `idle` the least recently used, without opening a new window.
    expect(counter.increment('busy', 60_000).count).toBe(2);
    counter.increment('new', 60_000);
    expect(counter.increment('busy', 60_000).count).toBe(3);
    expect(counter.increment('idle', 60_000).count).toBe(1);
  });
});
