import { sql } from 'kysely';
import { createAccountIfAbsent } from '../accounts/accounts.js';
import { writeStoredPins } from '../catalog/stored-pins.js';
import type { WriteScope } from '../changes/unit-of-work.js';
import type { ContentStore } from '../content/content-store.js';
import { chunk, MAX_IN_LIST, mapWithLimit, progressCounter, rowsPerInsert } from '../db/batches.js';
import { dialectOf } from '../db/tables.js';
import { yieldIfBusy } from '../foundation/pace.js';
import type { ResourceSource } from './catalog-input.js';
import type { ImportPlan, PlannedVersion } from './plan.js';

/** Object writes in flight at once: each is a file write and a flush, or a network round trip. */
const OBJECT_CONCURRENCY = 16;
/** Sources read at once (a file or two each). */
const READ_CONCURRENCY = 16;
/**
 * Resources and versions written per batch: each batch's manifests and contents are read, written and
 * let go before the next, so an import of any size holds one batch of them at a time.
 */
const WRITE_BATCH = 100;
/** New versions from which a write on PostgreSQL plans each foreign-key check afresh (see writePlan). */
const CUSTOM_PLANS_FROM = 1000;

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
  /** Collects the hashes this call stored for the first time. */
  created?: Set<string>,
): Promise<number> {
  const pending = new Map<string, ResourceSource>();
  for (const { row, source } of plan.newVersions) {
    if (row.storage_backend === 'object-storage' && !alreadyStored.has(row.content_hash)) {
      pending.set(row.content_hash, source);
    }
  }
  const counted = progressCounter(pending.size, 'stored objects:', onProgress);
  await mapWithLimit([...pending], OBJECT_CONCURRENCY, async ([hash, source]) => {
    if (await objectStore.put(hash, (await source.read()).content)) created?.add(hash);
    alreadyStored.add(hash);
    counted();
  });
  return pending.size;
}

/**
 * Writes the plan's rows through the write's transaction, and its changes to the log with them (a
 * batch of Resources at a time, so that no list of 100,000 changes is held). Rows go in multi-row
 * statements sized to stay under every dialect's bound-parameter limit; rows whose id exists are
 * updated in place by the same statements that insert new ones.
 *
 * @example
 * await writes.run('import', writer, (write) => writePlan(write, plan));
 */
export async function writePlan(
  write: Pick<WriteScope, 'db' | 'append'>,
  plan: ImportPlan,
  onProgress?: (line: string) => void,
): Promise<void> {
  const trx = write.db;
  // Created by another write meanwhile (a key of the account): then it is that write's change.
  const accountCreated =
    plan.accountToCreate !== undefined && (await createAccountIfAbsent(trx, plan.accountToCreate, plan.now));
  await write.append(plan.changes.filter((change) => change.type !== 'account.created' || accountCreated));

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
  // One at a time, its pins written as they are made: a version that pins 100,000 Resources is tens of
  // megabytes of JSON.
  for (const { pins, ...version } of plan.catalogVersions) {
    await trx.insertInto('catalog_versions').values(version).execute();
    await writeStoredPins(trx, version.id, pins());
  }

  if (plan.newVersions.length >= CUSTOM_PLANS_FROM && dialectOf(trx) === 'postgres') {
    // Each new version's row is checked against its Resource (a foreign key), by a query PostgreSQL
    // plans once per connection and keeps: planned while the Resources inserted so far were few, it
    // scans the table, and a write of 100,000 reads 5 billion rows. Planned for each row instead,
    // it looks the Resource up by its key.
    await sql`set local plan_cache_mode = force_custom_plan`.execute(trx);
  }

  // Resources in batches, each with the new versions that name them: a batch's manifests and
  // contents are read once, written, and let go before the next batch is read.
  // The planner lists a Resource's new version before the Resource's row, both in the tree's order,
  // so the versions are met in step with the rows (no index of 100,000 entries is needed).
  let nextVersion = 0;
  const resourcesWritten = progressCounter(plan.resourceRows.length, 'wrote resources:', onProgress);
  const versionsWritten = progressCounter(plan.newVersions.length, 'wrote resource versions:', onProgress);
  let versionCount = 0;
  for (const planned of chunk(plan.resourceRows, Math.min(WRITE_BATCH, rowsPerInsert(13)))) {
    const rows = planned.map((resource) => resource.row());
    await write.append(planned.map((resource) => resource.change()));
    const versions: PlannedVersion[] = [];
    for (const row of rows) {
      const version = plan.newVersions[nextVersion];
      if (version?.resourceId === row.id) {
        versions.push(version);
        nextVersion++;
      }
    }
    const sources = new Set<ResourceSource>(versions.map((version) => version.source));
    for (const { manifest } of rows) if (typeof manifest !== 'string') sources.add(manifest);
    const read = await mapWithLimit(
      [...sources],
      READ_CONCURRENCY,
      async (source) => [source, await source.read()] as const,
    );
    const bodies = new Map(read);
    const bodyOf = (source: ResourceSource) => bodies.get(source)!;

    await trx
      .insertInto('resources')
      .values(
        rows.map(({ manifest, ...row }) => ({
          ...row,
          manifest: typeof manifest === 'string' ? manifest : bodyOf(manifest).manifest,
        })),
      )
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
    // Other requests are answered between batches: a write of 100,000 Resources takes seconds (D20).
    await yieldIfBusy();
    if (versions.length === 0) continue;

    await trx
      .insertInto('resource_versions')
      .values(versions.map(({ row, source }) => ({ ...row, manifest: bodyOf(source).manifest })))
      .execute();
    // Database-text content commits or rolls back with the rows that name it; content already stored
    // (by an earlier batch or import) is left as it is.
    const blobs = new Map<string, string>();
    for (const { row, source } of versions) {
      if (row.storage_backend === 'database-text') blobs.set(row.content_hash, bodyOf(source).content);
    }
    for (const pairs of chunk([...blobs], rowsPerInsert(2))) {
      await trx
        .insertInto('content_blobs')
        .values(pairs.map(([content_hash, body]) => ({ content_hash, body })))
        .onConflict((oc) => oc.column('content_hash').doNothing())
        .execute();
    }
    versionsWritten(versions.length);
    versionCount += versions.length;
  }
  // A new version always comes with a change to its Resource's row (its current version at least).
  if (versionCount !== plan.newVersions.length)
    throw new Error('a planned version has no planned Resource row');

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
}
