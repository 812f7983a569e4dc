import type { StorageBackend } from '../schemas/playbook.js';

/**
 * Where Resource Version content lives. Content is addressed by its SHA-256, so a key never changes
 * meaning and writing the same content twice is harmless. Locations never leave the service.
 */
export interface ContentStore {
  /** The `storageBackend` value that versions kept here carry. */
  readonly backend: StorageBackend;
  /** Stores `content` under `hash`; a no-op when it is already there. True when it stored it now. */
  put(hash: string, content: string): Promise<boolean>;
  /**
   * Removes what is stored under `hash`, if anything: only for content a failed write stored and no
   * committed version names (content is otherwise kept for ever).
   */
  delete(hash: string): Promise<void>;
  /** The content stored under `hash`; throws {@link ContentNotFoundError} when there is none. */
  get(hash: string): Promise<string>;
  /** Throws when the store cannot be reached (readiness, D18). */
  check(): Promise<void>;
}

export class ContentNotFoundError extends Error {
  override name = 'ContentNotFoundError';
  constructor(readonly hash: string) {
    super(`no content stored for ${hash}`);
  }
}
