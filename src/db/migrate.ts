import { type Kysely, type Migration, type MigrationResultSet, Migrator, sql } from 'kysely';
import type { Databases } from './create-db.js';
import * as catalogs from './migrations/0001-catalogs.js';
import * as apiKeys from './migrations/0002-api-keys.js';
import * as byteOrderAndListIndexes from './migrations/0003-byte-order-and-list-indexes.js';
import * as dataGenerationAndPageIndex from './migrations/0004-data-generation-and-page-index.js';
import * as auditEvents from './migrations/0005-audit-events.js';
import * as changeLog from './migrations/0006-change-log.js';
import * as webhooks from './migrations/0009-webhooks.js';
import * as keySuccessor from './migrations/0010-key-successor.js';
import * as syncFeed from './migrations/0011-sync-feed.js';
import * as catalogVersionPins from './migrations/0012-catalog-version-pins.js';
import * as storedDetails from './migrations/0013-stored-details.js';
import * as webhookFairShare from './migrations/0014-webhook-fair-share.js';
import * as keyRestrictions from './migrations/0015-key-restrictions.js';
import * as keyUsage from './migrations/0016-key-usage.js';
import * as keyExpiryNotices from './migrations/0017-key-expiry-notices.js';
import type { Dialect } from './tables.js';

/** A migration of ours: written against no table types, told which dialect it runs on. */
interface DialectMigration {
  up(db: Kysely<unknown>, dialect: Dialect): Promise<void>;
  down?(db: Kysely<unknown>, dialect: Dialect): Promise<void>;
}

/** Every migration, in order. Listed explicitly so that the compiled service needs no directory scan. */
const migrations: Record<string, DialectMigration> = {
  '0001-catalogs': catalogs,
  '0002-api-keys': apiKeys,
  '0003-byte-order-and-list-indexes': byteOrderAndListIndexes,
  '0004-data-generation-and-page-index': dataGenerationAndPageIndex,
  '0005-audit-events': auditEvents,
  '0006-change-log': changeLog,
  '0009-webhooks': webhooks,
  '0010-key-successor': keySuccessor,
  '0011-sync-feed': syncFeed,
  '0012-catalog-version-pins': catalogVersionPins,
  '0013-stored-details': storedDetails,
  '0014-webhook-fair-share': webhookFairShare,
  '0015-key-restrictions': keyRestrictions,
  '0016-key-usage': keyUsage,
  '0017-key-expiry-notices': keyExpiryNotices,
};

/**
 * Brings the schema of the primary database up to date; throws with the failing migration's name.
 * Two runs at once never both migrate: the second waits for the first, then finds nothing to do.
 */
export function migrateToLatest(databases: Pick<Databases, 'primary' | 'dialect'>): Promise<string[]> {
  return migrate(databases, (migrator) => migrator.migrateToLatest());
}

/** Brings the schema up to the migration named `target` and no further (a test of the next one's data). */
export function migrateTo(
  databases: Pick<Databases, 'primary' | 'dialect'>,
  target: string,
): Promise<string[]> {
  if (!(target in migrations)) throw new Error(`no migration named ${target}`);
  return migrate(databases, (migrator) => migrator.migrateTo(target));
}

/** The migrations this version has that the database has not run, in order; it writes nothing. */
export async function pendingMigrations(
  databases: Pick<Databases, 'primary' | 'dialect'>,
): Promise<string[]> {
  const known = await migratorOn(
    databases.primary as unknown as Kysely<unknown>,
    databases.dialect,
  ).getMigrations();
  return known.filter((migration) => migration.executedAt === undefined).map((migration) => migration.name);
}

/** How long a run waits for another one's migrations to end: as long as Kysely's lock on PostgreSQL. */
const MIGRATION_WAIT_MS = 60 * 60 * 1000;

async function migrate(
  databases: Pick<Databases, 'primary' | 'dialect'>,
  run: (migrator: Migrator) => Promise<MigrationResultSet>,
): Promise<string[]> {
  const { dialect } = databases;
  // Migrations describe the schema the table types come from, so they see no table types.
  const primary = databases.primary as unknown as Kysely<unknown>;
  // On PostgreSQL, Kysely's migrator holds a session advisory lock from before it reads which migrations
  // ran until after the transaction that runs them all (postgres-adapter.js, `acquireMigrationLock`).
  // On SQLite it takes no lock at all, and runs each migration without a transaction: the whole run is
  // one transaction here, begun IMMEDIATE, so that it holds the file's write lock from that read on.
  const result: MigrationResultSet =
    dialect === 'sqlite'
      ? await primary
          .connection()
          .execute((connection) => holdingWriteLock(connection, () => run(migratorOn(connection, dialect))))
      : await run(migratorOn(primary, dialect));
  if (result.error) {
    const failed = result.results?.find((r) => r.status === 'Error')?.migrationName ?? 'unknown';
    throw new Error(`migration ${failed} failed: ${String(result.error)}`, { cause: result.error });
  }
  return (result.results ?? []).filter((r) => r.status === 'Success').map((r) => r.migrationName);
}

function migratorOn(db: Kysely<unknown>, dialect: Dialect): Migrator {
  const bound: Record<string, Migration> = {};
  for (const [name, migration] of Object.entries(migrations)) {
    const { down } = migration;
    bound[name] = {
      up: (on) => migration.up(on, dialect),
      ...(down ? { down: (on: Kysely<unknown>) => down(on, dialect) } : {}),
    };
  }
  return new Migrator({ db, provider: { getMigrations: async () => bound } });
}

/**
 * Runs `work` in a transaction that holds the SQLite file's write lock from its first statement,
 * committed when the migrations succeed and rolled back whole when one fails, as on PostgreSQL.
 */
async function holdingWriteLock(
  connection: Kysely<unknown>,
  work: () => Promise<MigrationResultSet>,
): Promise<MigrationResultSet> {
  const deadline = Date.now() + MIGRATION_WAIT_MS;
  for (;;) {
    try {
      // Waits up to the connection's busy_timeout for another writer, then says SQLITE_BUSY.
      await sql`begin immediate`.execute(connection);
      break;
    } catch (error) {
      if ((error as { code?: unknown }).code !== 'SQLITE_BUSY' || Date.now() > deadline) throw error;
    }
  }
  let result: MigrationResultSet;
  try {
    result = await work();
  } catch (error) {
    await sql`rollback`.execute(connection);
    throw error;
  }
  await sql.raw(result.error ? 'rollback' : 'commit').execute(connection);
  return result;
}
