import { describe, expect, it } from 'vitest';
import { growingCache } from '../../src/foundation/growing-cache.js';

describe('growingCache: an LRU bounded by its number of entries', () => {
  it('holds at most `max` entries, letting the least recently used go first', () => {
    const cache = growingCache<string, number>(100);
    for (let i = 0; i < 100; i++) cache.set(`k${i}`, i);
    expect(cache.size).toBe(100);
    cache.get('k0');
    for (let i = 100; i < 150; i++) cache.set(`k${i}`, i);
    expect(cache.size).toBe(100);
    expect(cache.get('k0')).toBe(0);
    expect(cache.has('k1')).toBe(false);
    expect(cache.has('k50')).toBe(false);
    expect(cache.get('k51')).toBe(51);
    expect(cache.get('k149')).toBe(149);
  });

  it('replacing an entry does not count it twice', () => {
    const cache = growingCache<string, number>(3);
    for (let round = 0; round < 5; round++) for (const key of ['a', 'b', 'c']) cache.set(key, round);
    expect(cache.size).toBe(3);
    expect([...cache.keys()].sort()).toEqual(['a', 'b', 'c']);
    expect(cache.get('a')).toBe(4);
  });
});
