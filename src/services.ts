import type { FastifyBaseLogger, FastifyInstance } from 'fastify';
import { sql } from 'kysely';
import type { Authenticator } from './auth/authenticator.js';
import { PlaybookService } from './catalog/playbook-service.js';
import type { Config } from './config.js';
import { ContentReader } from './content/content-reader.js';
import type { ContentStore } from './content/content-store.js';
import { DatabaseContentStore } from './content/database-store.js';
import { DirectoryContentStore } from './content/directory-store.js';
import { createDatabases, type Databases } from './db/create-db.js';
import { AuthenticationError } from './errors.js';
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
  readonly authenticator: Authenticator;
  /** Route plugins beyond the playbook reads (the identity area). */
  readonly plugins: ((app: FastifyInstance) => Promise<void>)[];
  /** Lines printed when the server starts: how a newcomer gets a token and a key. */
  gettingStarted(address: string): string[];
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
    // Placeholder until identity lands: refuses every credential.
    authenticator: {
      authenticate: async () => {
        throw new AuthenticationError('no credential is accepted yet');
      },
    },
    plugins: [],
    gettingStarted: (address) => [`Playbook is serving on ${address}`],
    close: () => databases.close(),
  };
}
