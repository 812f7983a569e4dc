import { chunk, MAX_IN_LIST } from '../db/batches.js';
import type { Db } from '../db/tables.js';
import type { NewChange } from './change-log.js';

/**
 * The changes of a Catalog that its Resources' details may show: those of its own fields, whose status
 * decides whether its Resources are seen. A new Catalog has no Resource yet; a new version of it
 * changes only its pins and times, which no detail shows.
 */
export const CATALOG_CHANGES_SHOWN: ReadonlySet<string> = new Set(['catalog.updated', 'catalog.archived']);

/**
 * Deletes the stored details (D30, migration 0013) of what `changes` name, through `trx`, the
 * transaction that appends them: every change of a Resource names it, and a Catalog's change that
 * shows in its Resources' details names the Catalog. So no stored detail outlives a commit that changed
 * what it shows, and the service writes it again from the new rows (catalog/stored-details.ts).
 */
export async function forgetStoredDetails(trx: Db, changes: readonly NewChange[]): Promise<void> {
  const resourceIds: string[] = [];
  const catalogIds: string[] = [];
  for (const { type, target } of changes) {
    if (target.kind === 'resource') resourceIds.push(target.id);
    else if (target.kind === 'catalog' && CATALOG_CHANGES_SHOWN.has(type)) catalogIds.push(target.id);
  }
  for (const ids of chunk(resourceIds, MAX_IN_LIST)) {
    await trx.deleteFrom('stored_details').where('resource_id', 'in', ids).execute();
  }
  for (const ids of chunk(catalogIds, MAX_IN_LIST)) {
    await trx.deleteFrom('stored_details').where('catalog_id', 'in', ids).execute();
  }
}
