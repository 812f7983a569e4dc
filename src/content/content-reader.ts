import { IntegrityError } from '../foundation/errors.js';
import type { StorageBackend } from '../schemas/playbook.js';
import type { ContentStore } from './content-store.js';
import { sha256Hex } from './hash.js';

export interface ContentReaderOptions {
  readonly onIntegrityError?: (details: { hash: string; backend: StorageBackend; actual: string }) => void;
}

/**
 * Loads content from the store its version names and checks it against its hash on every load (D12).
 * It keeps nothing: the answers that carry content are what the read path keeps (answer-cache.ts).
 */
export class ContentReader {
  private readonly stores: ReadonlyMap<StorageBackend, ContentStore>;

  constructor(
    stores: readonly ContentStore[],
    private readonly options: ContentReaderOptions = {},
  ) {
    this.stores = new Map(stores.map((store) => [store.backend, store]));
  }

  private storeFor(backend: StorageBackend): ContentStore {
    const store = this.stores.get(backend);
    if (!store) throw new Error(`no content store for ${backend}`);
    return store;
  }

  async read(backend: StorageBackend, hash: string): Promise<string> {
    return this.checked(backend, hash, await this.storeFor(backend).get(hash));
  }

  /** `content`, read from `backend` by another way (a statement that reads it with its row), checked. */
  checked(backend: StorageBackend, hash: string, content: string): string {
    const actual = sha256Hex(content);
    if (actual !== hash) {
      this.options.onIntegrityError?.({ hash, backend, actual });
      throw new IntegrityError(`content ${hash} does not match its hash`);
    }
    return content;
  }
}
