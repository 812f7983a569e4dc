import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import {
  CreateBucketCommand,
  DeleteBucketCommand,
  DeleteObjectCommand,
  ListObjectsV2Command,
  S3Client,
} from '@aws-sdk/client-s3';
import { Kysely, type LogEvent, PostgresDialect, SqliteDialect } from 'kysely';
import pg from 'pg';
import { inject } from 'vitest';
import { ContentReader } from '../../src/content/content-reader.js';
import type { ContentStore } from '../../src/content/content-store.js';
import { DatabaseContentStore } from '../../src/content/database-store.js';
import { DirectoryContentStore } from '../../src/content/directory-store.js';
import { S3ContentStore } from '../../src/content/s3-store.js';
import {
  createDatabases,
  type Databases,
  sqliteDriver,
  survivingLostConnections,
} from '../../src/db/create-db.js';
import { migrateTo, migrateToLatest } from '../../src/db/migrate.js';
import type { Database, Db } from '../../src/db/tables.js';
import type { Observation } from '../../src/observability/observation.js';
import { type ProductionServers, type S3Endpoint, uniqueName } from './servers.js';

/**
 * One isolated backend for one test file: its own database and its own content store, removed by
 * `cleanup()`. Which combination depends on the vitest project running the file:
 * - `embedded`: SQLite in a temporary directory, and a local directory as the object store;
 * - `production`: a PostgreSQL database of its own on the shared test cluster (created here, dropped
 *   by `cleanup()`), and an S3 bucket of its own on the S3 test server.
 */
export interface TestBackend {
  readonly backendKind: 'embedded' | 'production';
  readonly databases: Databases;
  readonly objectStore: ContentStore;
  readonly content: ContentReader;
  /** A directory the test may use for its own files (import trees, keys). */
  readonly workDir: string;
  /**
   * Configuration variables (D13, plus the AWS_* ones the SDK reads) that point `loadConfig`, the
   * CLI or a child process at this same backend; merge them over the test's own.
   */
  readonly env: Readonly<Record<string, string>>;
  /** The Redis test server, in the production project only; tests share it, so keys need a prefix. */
  readonly redisUrl?: string;
  cleanup(): Promise<void>;
}

export interface TestBackendOptions {
  /** The last migration to run (a test of what the next one does to existing data); all by default. */
  readonly migrateTo?: string;
  /** The metrics and tracing its databases record into (a test of them); their own by default. */
  readonly observation?: Observation;
}

export async function createTestBackend(options: TestBackendOptions = {}): Promise<TestBackend> {
  const servers = inject('playbookServers');
  return servers ? createProductionBackend(servers, options) : createEmbeddedBackend(options);
}

function migrated(databases: Databases, options: TestBackendOptions): Promise<string[]> {
  return options.migrateTo === undefined
    ? migrateToLatest(databases)
    : migrateTo(databases, options.migrateTo);
}

async function createEmbeddedBackend(options: TestBackendOptions): Promise<TestBackend> {
  const workDir = await fs.mkdtemp(path.join(os.tmpdir(), 'playbook-test-'));
  const databaseFile = path.join(workDir, 'playbook.sqlite');
  const contentDir = path.join(workDir, 'content');
  const databases = createDatabases({ kind: 'sqlite', path: databaseFile }, undefined, options.observation);
  await migrated(databases, options);
  const objectStore = new DirectoryContentStore(contentDir);
  const content = new ContentReader([new DatabaseContentStore(databases.reader), objectStore]);
  return {
    backendKind: 'embedded',
    databases,
    objectStore,
    content,
    workDir,
    env: {
      PLAYBOOK_DATA_DIR: workDir,
      PLAYBOOK_DATABASE_URL: `sqlite:${databaseFile}`,
      PLAYBOOK_CONTENT_STORE: contentDir,
    },
    cleanup: async () => {
      await databases.close();
      await fs.rm(workDir, { recursive: true, force: true });
    },
  };
}

/** An S3 client for test set-up and clean-up, outside the store under test. */
export function s3AdminClient(s3: S3Endpoint): S3Client {
  return new S3Client({
    endpoint: s3.endpoint,
    forcePathStyle: true,
    region: s3.region,
    credentials: { accessKeyId: s3.accessKeyId, secretAccessKey: s3.secretAccessKey },
  });
}

/** The admin client for the S3 store a production backend was given, from its configuration. */
export function s3AdminClientFor(backend: TestBackend): S3Client {
  const env = backend.env;
  return s3AdminClient({
    endpoint: env.PLAYBOOK_S3_ENDPOINT!,
    region: env.AWS_REGION!,
    accessKeyId: env.AWS_ACCESS_KEY_ID!,
    secretAccessKey: env.AWS_SECRET_ACCESS_KEY!,
  });
}

/** Deletes every object of the bucket, then the bucket. */
export async function removeBucket(client: S3Client, bucket: string): Promise<void> {
  for (;;) {
    const page = await client.send(new ListObjectsV2Command({ Bucket: bucket, MaxKeys: 1000 }));
    const keys = (page.Contents ?? []).flatMap((object) => (object.Key ? [object.Key] : []));
    if (keys.length === 0) break;
    // One by one: DeleteObjects needs a Content-MD5 that not every S3-compatible server accepts.
    await Promise.all(keys.map((Key) => client.send(new DeleteObjectCommand({ Bucket: bucket, Key }))));
  }
  await client.send(new DeleteBucketCommand({ Bucket: bucket }));
}

async function adminQuery(adminUrl: string, statement: string): Promise<void> {
  const client = new pg.Client({ connectionString: adminUrl });
  await client.connect();
  try {
    await client.query(statement);
  } finally {
    await client.end();
  }
}

async function createProductionBackend(
  servers: ProductionServers,
  options: TestBackendOptions,
): Promise<TestBackend> {
  const workDir = await fs.mkdtemp(path.join(os.tmpdir(), 'playbook-test-'));
  // Names come from hex digits only, so they need no quoting beyond the identifier quotes.
  const database = uniqueName('playbook_test_');
  const bucket = uniqueName('playbook-test-');
  const prefix = 'content';
  const databaseUrl = new URL(servers.postgres.adminUrl);
  databaseUrl.pathname = `/${database}`;

  await adminQuery(servers.postgres.adminUrl, `CREATE DATABASE "${database}"`);
  const s3 = s3AdminClient(servers.s3);
  let databases: Databases | undefined;
  let objectStore: S3ContentStore | undefined;
  let bucketCreated = false;
  const cleanup = async () => {
    objectStore?.close();
    await databases?.close();
    // FORCE: a connection a failed test left open must not keep the database alive.
    await adminQuery(servers.postgres.adminUrl, `DROP DATABASE IF EXISTS "${database}" WITH (FORCE)`);
    if (bucketCreated) await removeBucket(s3, bucket);
    s3.destroy();
    await fs.rm(workDir, { recursive: true, force: true });
  };
  try {
    await s3.send(new CreateBucketCommand({ Bucket: bucket }));
    bucketCreated = true;
    databases = createDatabases(
      { kind: 'postgres', url: databaseUrl.toString() },
      undefined,
      options.observation,
    );
    await migrated(databases, options);
    objectStore = new S3ContentStore({
      bucket,
      prefix,
      endpoint: servers.s3.endpoint,
      client: {
        region: servers.s3.region,
        credentials: { accessKeyId: servers.s3.accessKeyId, secretAccessKey: servers.s3.secretAccessKey },
      },
    });
  } catch (error) {
    await cleanup().catch(() => {});
    throw error;
  }
  const content = new ContentReader([new DatabaseContentStore(databases.reader), objectStore]);
  return {
    backendKind: 'production',
    databases,
    objectStore,
    content,
    workDir,
    env: {
      PLAYBOOK_DATA_DIR: workDir,
      PLAYBOOK_DATABASE_URL: databaseUrl.toString(),
      PLAYBOOK_CONTENT_STORE: `s3://${bucket}/${prefix}`,
      PLAYBOOK_S3_ENDPOINT: servers.s3.endpoint,
      // Instances that share a PostgreSQL database share the deployment's key (D27, D28).
      PLAYBOOK_DEPLOYMENT_KEY: randomBytes(32).toString('base64'),
      AWS_REGION: servers.s3.region,
      AWS_ACCESS_KEY_ID: servers.s3.accessKeyId,
      AWS_SECRET_ACCESS_KEY: servers.s3.secretAccessKey,
      AWS_EC2_METADATA_DISABLED: 'true',
    },
    redisUrl: servers.redisUrl,
    cleanup,
  };
}

/**
 * A connection of the test's own to the backend's database, beside the service's (at most
 * `connections` of them on PostgreSQL), whose statements `log` is told of: what a test counts or
 * records of the statements a read sends.
 *
 * A PostgreSQL connection it loses is not an error of the test process, as for the service's pools:
 * `destroy()` resolves before its connections have closed, and `cleanup()` then drops the database
 * with FORCE, which may end one that is still closing.
 */
export function loggedDb(backend: TestBackend, log: (event: LogEvent) => void, connections = 1): Db {
  const url = backend.env.PLAYBOOK_DATABASE_URL!;
  if (url.startsWith('sqlite:')) {
    const database = new (sqliteDriver())(url.slice('sqlite:'.length));
    return new Kysely<Database>({ dialect: new SqliteDialect({ database }), log });
  }
  const pool = new pg.Pool({ connectionString: url, max: connections });
  survivingLostConnections(pool);
  return new Kysely<Database>({ dialect: new PostgresDialect({ pool }), log });
}
