import { type Kysely, type Migration, type MigrationResultSet, Migrator } from 'kysely';
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

/** Brings the schema of the primary database up to date; throws with the failing migration's name. */
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

async function migrate(
  databases: Pick<Databases, 'primary' | 'dialect'>,
  run: (migrator: Migrator) => Promise<MigrationResultSet>,
): Promise<string[]> {
  const { dialect } = databases;
  const bound: Record<string, Migration> = {};
  for (const [name, migration] of Object.entries(migrations)) {
    const { down } = migration;
    bound[name] = {
      up: (db) => migration.up(db, dialect),
      ...(down ? { down: (db: Kysely<unknown>) => down(db, dialect) } : {}),
    };
  }
  // Migrations describe the schema the table types come from, so they see no table types.
  const migrator = new Migrator({
    db: databases.primary as unknown as Kysely<unknown>,
    provider: { getMigrations: async () => bound },
  });
  const result: MigrationResultSet = await run(migrator);
  if (result.error) {
    const failed = result.results?.find((r) => r.status === 'Error')?.migrationName ?? 'unknown';
    throw new Error(`migration ${failed} failed: ${String(result.error)}`, { cause: result.error });
  }
  return (result.results ?? []).filter((r) => r.status === 'Success').map((r) => r.migrationName);
}
