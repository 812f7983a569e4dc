import { v7 as uuidv7 } from 'uuid';
import { DatabaseContentStore } from '../../src/content/database-store.js';
import { canonicalJson, sha256Hex, utf8Size } from '../../src/content/hash.js';
import type { Db } from '../../src/db/tables.js';
import type { Facets, LifecycleStatus, Manifest } from '../../src/schemas/common.js';
import type { ResourceKind, ResourcePin, StorageBackend, VersionStatus } from '../../src/schemas/playbook.js';
import type { TestBackend } from './backend.js';

/**
 * Rows written straight into storage, for HTTP tests that need exact states (drafts, superseded
 * versions, other accounts) without going through an import.
 */

let clock = Date.parse('2026-01-01T00:00:00.000Z');
/** Strictly increasing timestamps, so that orderings by time are deterministic. */
export function tick(): string {
  clock += 1000;
  return new Date(clock).toISOString();
}

export async function givenAccount(db: Db, id: string, plan = 'free'): Promise<string> {
  const now = tick();
  await db.insertInto('accounts').values({ id, name: id, plan, created_at: now, updated_at: now }).execute();
  return id;
}

export interface CatalogFixture {
  accountId?: string | null;
  slug: string;
  name?: string;
  status?: LifecycleStatus;
  description?: string;
  facets?: Facets;
  version?: string;
}

export async function givenCatalog(db: Db, fixture: CatalogFixture) {
  const id = uuidv7();
  const now = tick();
  await db
    .insertInto('catalogs')
    .values({
      id,
      account_id: fixture.accountId ?? null,
      slug: fixture.slug,
      name: fixture.name ?? `Catalog ${fixture.slug}`,
      status: fixture.status ?? 'active',
      description: fixture.description ?? null,
      facets: fixture.facets ? JSON.stringify(fixture.facets) : null,
      current_version_id: null,
      created_at: now,
      updated_at: now,
      archived_at: fixture.status === 'archived' ? now : null,
    })
    .execute();
  for (const [facet, values] of Object.entries(fixture.facets ?? {})) {
    for (const value of values ?? []) {
      await db.insertInto('catalog_facet_values').values({ catalog_id: id, facet, value }).execute();
    }
  }
  return { id, slug: fixture.slug, accountId: fixture.accountId ?? null };
}

export interface ResourceFixture {
  slug: string;
  kind?: ResourceKind;
  title?: string;
  status?: LifecycleStatus;
  description?: string;
  facets?: Facets;
  manifest?: Manifest;
  versions?: {
    version: string;
    content: string;
    status?: VersionStatus;
    mediaType?: string;
    storage?: StorageBackend;
  }[];
}

/** A Resource with its versions; the last version listed becomes the current one. */
export async function givenResource(backend: TestBackend, catalog: { id: string }, fixture: ResourceFixture) {
  const db = backend.databases.primary;
  const id = uuidv7();
  const now = tick();
  await db
    .insertInto('resources')
    .values({
      id,
      catalog_id: catalog.id,
      slug: fixture.slug,
      kind: fixture.kind ?? 'document',
      title: fixture.title ?? `Resource ${fixture.slug}`,
      status: fixture.status ?? 'active',
      description: fixture.description ?? null,
      facets: fixture.facets ? JSON.stringify(fixture.facets) : null,
      manifest: JSON.stringify(fixture.manifest ?? {}),
      current_version_id: null,
      created_at: now,
      updated_at: now,
      archived_at: fixture.status === 'archived' ? now : null,
    })
    .execute();
  const versions = fixture.versions ?? [{ version: '1.0.0', content: `# ${fixture.slug}\n` }];
  const versionIds: string[] = [];
  for (const [index, spec] of versions.entries()) {
    const versionId = uuidv7();
    const hash = sha256Hex(spec.content);
    const storage = spec.storage ?? 'database-text';
    const store = storage === 'database-text' ? new DatabaseContentStore(db) : backend.objectStore;
    await store.put(hash, spec.content);
    const isCurrent = index === versions.length - 1;
    const status = spec.status ?? (isCurrent ? 'published' : 'superseded');
    const at = tick();
    await db
      .insertInto('resource_versions')
      .values({
        id: versionId,
        resource_id: id,
        version: spec.version,
        content_hash: hash,
        content_size_bytes: utf8Size(spec.content),
        media_type: spec.mediaType ?? 'text/markdown',
        storage_backend: storage,
        status,
        manifest: JSON.stringify(fixture.manifest ?? {}),
        published_at: status === 'draft' ? null : at,
        superseded_at: status === 'superseded' ? at : null,
        archived_at: status === 'archived' ? at : null,
        created_at: at,
      })
      .execute();
    versionIds.push(versionId);
  }
  const currentVersionId = versionIds.at(-1)!;
  await db
    .updateTable('resources')
    .set({ current_version_id: currentVersionId })
    .where('id', '=', id)
    .execute();
  return { id, slug: fixture.slug, versionIds, currentVersionId };
}

/** Publishes a catalog version pinning the given resources. */
export async function givenCatalogVersion(
  db: Db,
  catalog: { id: string; slug: string; accountId: string | null },
  version: string,
  pins: Omit<ResourcePin, 'resourceHumanRef'>[] & { slug?: string }[],
) {
  const owner = catalog.accountId === null ? 'svc' : 'org';
  const resourcePins = pins.map((pin) => ({
    resourceId: pin.resourceId,
    resourceHumanRef: `${owner}/${catalog.slug}/${(pin as { slug?: string }).slug ?? 'x'}`,
    resourceVersionId: pin.resourceVersionId,
    version: pin.version,
    contentHash: pin.contentHash,
  }));
  const id = uuidv7();
  const at = tick();
  await db
    .insertInto('catalog_versions')
    .values({
      id,
      catalog_id: catalog.id,
      version,
      pins: JSON.stringify(resourcePins),
      manifest_hash: sha256Hex(canonicalJson(resourcePins)),
      resource_count: resourcePins.length,
      published_at: at,
      created_at: at,
    })
    .execute();
  await db.updateTable('catalogs').set({ current_version_id: id }).where('id', '=', catalog.id).execute();
  return id;
}
