import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { ContentReader } from '../../src/content/content-reader.js';
import type { ContentStore } from '../../src/content/content-store.js';
import { DatabaseContentStore } from '../../src/content/database-store.js';
import { DirectoryContentStore } from '../../src/content/directory-store.js';
import { createDatabases, type Databases } from '../../src/db/create-db.js';
import { migrateToLatest } from '../../src/db/migrate.js';

/**
 * One isolated backend for one test file: its own database and its own content store, removed by
 * `cleanup()`. The embedded default is SQLite plus a temporary directory.
 */
export interface TestBackend {
  readonly databases: Databases;
  readonly objectStore: ContentStore;
  readonly content: ContentReader;
  /** A directory the test may use for its own files (import trees, keys). */
  readonly workDir: string;
  cleanup(): Promise<void>;
}

export async function createTestBackend(): Promise<TestBackend> {
  const workDir = await fs.mkdtemp(path.join(os.tmpdir(), 'playbook-test-'));
  const databases = createDatabases({ kind: 'sqlite', path: path.join(workDir, 'playbook.sqlite') });
  await migrateToLatest(databases.primary);
  const objectStore = new DirectoryContentStore(path.join(workDir, 'content'));
  const content = new ContentReader([new DatabaseContentStore(databases.reader), objectStore]);
  return {
    databases,
    objectStore,
    content,
    workDir,
    cleanup: async () => {
      await databases.close();
      await fs.rm(workDir, { recursive: true, force: true });
    },
  };
}
