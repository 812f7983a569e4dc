import { LRUCache } from 'lru-cache';
import { IntegrityError } from '../errors.js';
import type { StorageBackend } from '../schemas/playbook.js';
import type { ContentStore } from './content-store.js';
import { sha256Hex } from './hash.js';

export interface ContentReaderOptions {
  /** Bytes of verified content kept in memory. Content is immutable by hash, so entries never go stale. */
  readonly cacheBytes?: number;
  readonly onIntegrityError?: (details: { hash: string; backend: StorageBackend; actual: string }) => void;
}

/**
 * Loads content from the store its version names and checks it against its hash on every load from a
 * store (D12). Only verified content is cached.
 */
export class ContentReader {
  private readonly cache: LRUCache<string, string>;
  private readonly stores: ReadonlyMap<StorageBackend, ContentStore>;

  constructor(
    stores: readonly ContentStore[],
    private readonly options: ContentReaderOptions = {},
  ) {
    this.stores = new Map(stores.map((store) => [store.backend, store]));
    this.cache = new LRUCache<string, string>({
      maxSize: options.cacheBytes ?? 64 * 1024 * 1024,
      sizeCalculation: (value) => Math.max(1, value.length * 2),
    });
  }

  storeFor(backend: StorageBackend): ContentStore {
    const store = this.stores.get(backend);
    if (!store) throw new Error(`no content store for ${backend}`);
    return store;
  }

  async read(backend: StorageBackend, hash: string): Promise<string> {
    const cached = this.cache.get(hash);
    if (cached !== undefined) return cached;
    const content = await this.storeFor(backend).get(hash);
    const actual = sha256Hex(content);
    if (actual !== hash) {
      this.options.onIntegrityError?.({ hash, backend, actual });
      throw new IntegrityError(`content ${hash} does not match its hash`);
    }
    this.cache.set(hash, content);
    return content;
  }

  async check(): Promise<void> {
    await Promise.all([...this.stores.values()].map((store) => store.check()));
  }
}
