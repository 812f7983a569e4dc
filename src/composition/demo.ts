import { fileURLToPath } from 'node:url';
import type { FastifyBaseLogger } from 'fastify';
import type { Db } from '../db/tables.js';
import { importTree } from '../import/import-tree.js';
import type { Services } from './services.js';

/**
 * The service-owned catalogs shipped with the repository. Resolved from this module, which sits one
 * level below the package root both as source (`src/`) and compiled (`dist/`).
 */
export const DEMO_CATALOGS_DIR = fileURLToPath(new URL('../../demo/catalogs/', import.meta.url));

/**
 * Imports the demo catalogs as service-owned content when there is none yet, so that the first
 * request on a fresh data directory returns real data. A deployment that imported its own service
 * content first never sees the demo.
 *
 * @example
 * await importDemoContentIfEmpty(services, logger); // once, before listening
 */
export async function importDemoContentIfEmpty(services: Services, logger: FastifyBaseLogger): Promise<void> {
  const db = services.databases.primary;
  if (await hasServiceCatalogs(db)) return;
  try {
    const report = await importTree(
      { db, objectStore: services.objectStore, writes: services.writes },
      { dir: DEMO_CATALOGS_DIR, owner: { kind: 'svc' } },
    );
    // Another instance may have imported it between the check above and this import's transaction.
    if (!report.changed) return;
    logger.info(
      {
        catalogs: report.counts.catalogsCreated,
        resources: report.counts.resourcesCreated,
        objects: report.counts.objectsStored,
      },
      'imported the demo catalogs',
    );
  } catch (error) {
    // Instances that start together on one empty database race to import; the losers find the
    // winner's catalogs and carry on.
    if (await hasServiceCatalogs(db)) return;
    throw error;
  }
}

async function hasServiceCatalogs(db: Db): Promise<boolean> {
  const row = await db
    .selectFrom('catalogs')
    .select('id')
    .where('account_id', 'is', null)
    .limit(1)
    .executeTakeFirst();
  return row !== undefined;
}
