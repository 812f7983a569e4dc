import type { FastifyBaseLogger } from 'fastify';
import { sql } from 'kysely';
import { PlaybookService } from './catalog/playbook-service.js';
import type { Config } from './config.js';
import { ContentReader } from './content/content-reader.js';
import type { ContentStore } from './content/content-store.js';
import { DatabaseContentStore } from './content/database-store.js';
import { DirectoryContentStore } from './content/directory-store.js';
import { createDatabases, type Databases } from './db/create-db.js';
import type { ReadinessCheck } from './routes/operations.js';

/** The long-lived parts every command shares, built once from the configuration. */
export interface Services {
  readonly config: Config;
  readonly databases: Databases;
  /** The object store that holds `object-storage` content (a directory, or S3). */
  readonly objectStore: ContentStore;
  readonly content: ContentReader;
  readonly playbook: PlaybookService;
  readonly readiness: ReadinessCheck[];
  close(): Promise<void>;
}

export function createObjectStore(config: Config): ContentStore {
  if (config.contentStore.kind === 'directory') return new DirectoryContentStore(config.contentStore.path);
  throw new Error('PLAYBOOK_CONTENT_STORE=s3://… is not supported by this build');
}

/** Composes databases, content stores and services. Opens connections lazily; starts no server. */
export function createServices(config: Config, logger: FastifyBaseLogger): Services {
  const databases = createDatabases(config.database);
  const objectStore = createObjectStore(config);
  const content = new ContentReader([new DatabaseContentStore(databases.reader), objectStore], {
    onIntegrityError: (details) =>
      logger.error(details, 'stored content does not match its hash; not served'),
  });
  const playbook = new PlaybookService(databases.reader, content);
  const readiness: ReadinessCheck[] = [
    { name: 'database', check: async () => void (await sql`select 1`.execute(databases.primary)) },
    { name: 'contentStore', check: () => objectStore.check() },
  ];
  return {
    config,
    databases,
    objectStore,
    content,
    playbook,
    readiness,
    close: () => databases.close(),
  };
}
