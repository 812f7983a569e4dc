import { LRUCache } from 'lru-cache';

/**
 * An LRU cache of at most `max` entries that takes memory as it fills.
 *
 * Given `max`, lru-cache allocates room for all of its entries at once (two arrays and two typed
 * arrays of `max` slots): an idle instance held megabytes of empty slots for keys, windows and plans it
 * had not met. Counted instead by a size of one an entry, it bounds the same number and grows as
 * entries come.
 */
export function growingCache<K extends {}, V extends {}>(max: number): LRUCache<K, V> {
  return new LRUCache<K, V>({ maxSize: max, sizeCalculation: () => 1 });
}
