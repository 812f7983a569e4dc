import { type Kysely, type Migration, type MigrationResultSet, Migrator } from 'kysely';
import * as catalogs from './migrations/0001-catalogs.js';
import * as apiKeys from './migrations/0002-api-keys.js';
import * as byteOrderAndListIndexes from './migrations/0003-byte-order-and-list-indexes.js';
import type { Database } from './tables.js';

/** Every migration, in order. Listed explicitly so that the compiled service needs no directory scan. */
const migrations: Record<string, Migration> = {
  '0001-catalogs': catalogs,
  '0002-api-keys': apiKeys,
  '0003-byte-order-and-list-indexes': byteOrderAndListIndexes,
};

/** Brings the schema up to date; throws with the failing migration's name. */
export async function migrateToLatest(db: Kysely<Database>): Promise<string[]> {
  // Migrations are written against no table types: they describe the schema those types come from.
  const migrator = new Migrator({
    db: db as unknown as Kysely<unknown>,
    provider: { getMigrations: async () => migrations },
  });
  const result: MigrationResultSet = await migrator.migrateToLatest();
  if (result.error) {
    const failed = result.results?.find((r) => r.status === 'Error')?.migrationName ?? 'unknown';
    throw new Error(`migration ${failed} failed: ${String(result.error)}`, { cause: result.error });
  }
  return (result.results ?? []).filter((r) => r.status === 'Success').map((r) => r.migrationName);
}
