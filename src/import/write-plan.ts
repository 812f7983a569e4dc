import { createAccountIfAbsent } from '../catalog/accounts.js';
import { advanceDataGeneration } from '../catalog/data-generation.js';
import type { ContentStore } from '../content/content-store.js';
import { DatabaseContentStore } from '../content/database-store.js';
import type { Db } from '../db/tables.js';
import { chunk, MAX_IN_LIST, mapWithLimit, progressCounter, rowsPerInsert } from './batches.js';
import type { ImportPlan } from './plan-import.js';

/** Object writes in flight at once: each is a file write and a flush, or a network round trip. */
const OBJECT_CONCURRENCY = 16;

/**
 * Puts the plan's `object-storage` contents into the object store, skipping hashes in `alreadyStored`
 * and adding the ones it writes. Runs before the database transaction commits, so that a committed row
 * never names a missing object; an import that fails later leaves at worst unreferenced objects, which
 * content addressing makes harmless.
 *
 * @example
 * const stored = new Set<string>();
 * await storeObjects(objectStore, plan, stored);
 */
export async function storeObjects(
  objectStore: ContentStore,
  plan: ImportPlan,
  alreadyStored: Set<string>,
  onProgress?: (line: string) => void,
): Promise<number> {
  const pending = new Map<string, string>();
  for (const { row, content } of plan.newVersions) {
    if (row.storage_backend === 'object-storage' && !alreadyStored.has(row.content_hash)) {
      pending.set(row.content_hash, content);
    }
  }
  const counted = progressCounter(pending.size, 'stored objects:', onProgress);
  await mapWithLimit([...pending], OBJECT_CONCURRENCY, async ([hash, content]) => {
    await objectStore.put(hash, content);
    alreadyStored.add(hash);
    counted();
  });
  return pending.size;
}

/**
 * Writes the plan's rows through `trx`, a transaction the caller commits. Rows go in multi-row
 * statements sized to stay under every dialect's bound-parameter limit; rows whose id exists are
 * updated in place by the same statements that insert new ones.
 *
 * @example
 * await db.transaction().execute((trx) => writePlan(trx, plan));
 */
export async function writePlan(
  trx: Db,
  plan: ImportPlan,
  onProgress?: (line: string) => void,
): Promise<void> {
  if (plan.accountToCreate !== undefined) await createAccountIfAbsent(trx, plan.accountToCreate, plan.now);

  for (const rows of chunk(plan.catalogRows, rowsPerInsert(11))) {
    await trx
      .insertInto('catalogs')
      .values(rows)
      .onConflict((oc) =>
        oc.column('id').doUpdateSet((eb) => ({
          name: eb.ref('excluded.name'),
          status: eb.ref('excluded.status'),
          description: eb.ref('excluded.description'),
          facets: eb.ref('excluded.facets'),
          current_version_id: eb.ref('excluded.current_version_id'),
          updated_at: eb.ref('excluded.updated_at'),
          archived_at: eb.ref('excluded.archived_at'),
        })),
      )
      .execute();
  }
  for (const ids of chunk(plan.facetCatalogIds, MAX_IN_LIST)) {
    await trx.deleteFrom('catalog_facet_values').where('catalog_id', 'in', ids).execute();
  }
  for (const rows of chunk(plan.facetRows, rowsPerInsert(3))) {
    await trx.insertInto('catalog_facet_values').values(rows).execute();
  }
  for (const rows of chunk(plan.catalogVersions, rowsPerInsert(8))) {
    await trx.insertInto('catalog_versions').values(rows).execute();
  }

  const resourcesWritten = progressCounter(plan.resourceRows.length, 'wrote resources:', onProgress);
  for (const rows of chunk(plan.resourceRows, rowsPerInsert(13))) {
    await trx
      .insertInto('resources')
      .values(rows)
      .onConflict((oc) =>
        oc.column('id').doUpdateSet((eb) => ({
          kind: eb.ref('excluded.kind'),
          title: eb.ref('excluded.title'),
          status: eb.ref('excluded.status'),
          description: eb.ref('excluded.description'),
          facets: eb.ref('excluded.facets'),
          manifest: eb.ref('excluded.manifest'),
          current_version_id: eb.ref('excluded.current_version_id'),
          updated_at: eb.ref('excluded.updated_at'),
          archived_at: eb.ref('excluded.archived_at'),
        })),
      )
      .execute();
    resourcesWritten(rows.length);
  }

  for (const ids of chunk(plan.supersededVersionIds, MAX_IN_LIST)) {
    await trx
      .updateTable('resource_versions')
      .set({ status: 'superseded', superseded_at: plan.now })
      .where('id', 'in', ids)
      .execute();
  }
  for (const ids of chunk(plan.publishedVersionIds, MAX_IN_LIST)) {
    await trx
      .updateTable('resource_versions')
      .set({ status: 'published', published_at: plan.now })
      .where('id', 'in', ids)
      .execute();
  }

  const versionsWritten = progressCounter(plan.newVersions.length, 'wrote resource versions:', onProgress);
  for (const versions of chunk(plan.newVersions, rowsPerInsert(13))) {
    await trx
      .insertInto('resource_versions')
      .values(versions.map((version) => version.row))
      .execute();
    versionsWritten(versions.length);
  }

  // Database-text content commits or rolls back with the rows that name it.
  const blobs = new DatabaseContentStore(trx);
  const texts = new Map<string, string>();
  for (const { row, content } of plan.newVersions) {
    if (row.storage_backend === 'database-text') texts.set(row.content_hash, content);
  }
  for (const [hash, content] of texts) await blobs.put(hash, content);
  // Answers kept in memory anywhere are stale from this commit on.
  await advanceDataGeneration(trx);
}
