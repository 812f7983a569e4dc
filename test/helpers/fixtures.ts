import fs from 'node:fs/promises';
import path from 'node:path';
import { DeleteObjectCommand, PutObjectCommand } from '@aws-sdk/client-s3';
import { v7 as uuidv7 } from 'uuid';
import { writeStoredPins } from '../../src/catalog/stored-pins.js';
import { DatabaseContentStore } from '../../src/content/database-store.js';
import { DirectoryContentStore } from '../../src/content/directory-store.js';
import { canonicalJson, sha256Hex, utf8Size } from '../../src/content/hash.js';
import { S3ContentStore } from '../../src/content/s3-store.js';
import type { Db } from '../../src/db/tables.js';
import type { Facets, LifecycleStatus, Manifest } from '../../src/schemas/common.js';
import type { ResourceKind, ResourcePin, StorageBackend, VersionStatus } from '../../src/schemas/playbook.js';
import { s3AdminClientFor, type TestBackend } from './backend.js';
import { dataChanged } from './read-side.js';

/**
 * Rows written straight into storage, for HTTP tests that need exact states (drafts, superseded
 * versions, other accounts) without going through an import. Each writer of Catalog data advances the
 * change log's head afterwards (`dataChanged`), which makes every read side start afresh.
 */

let clock = Date.parse('2026-01-01T00:00:00.000Z');
/** Strictly increasing timestamps, so that orderings by time are deterministic. */
export function tick(): string {
  clock += 1000;
  return new Date(clock).toISOString();
}

export async function givenAccount(db: Db, id: string, plan = 'free'): Promise<string> {
  const now = tick();
  // An upsert: the account may already exist because a caller's API key was minted for it.
  await db
    .insertInto('accounts')
    .values({ id, name: id, plan, created_at: now, updated_at: now })
    .onConflict((oc) => oc.column('id').doUpdateSet({ plan, updated_at: now }))
    .execute();
  return id;
}

export interface CatalogFixture {
  accountId?: string | null;
  slug: string;
  name?: string;
  status?: LifecycleStatus;
  description?: string;
  facets?: Facets;
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
  await dataChanged(db);
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
  versions?: VersionFixture[];
  /** Whether `current_version_id` points at the last version (true) or is left unset (false). */
  withCurrent?: boolean;
}

export interface VersionFixture {
  version: string;
  content: string;
  status?: VersionStatus;
  mediaType?: string;
  storage?: StorageBackend;
  manifest?: Manifest;
}

export interface GivenVersion {
  id: string;
  version: string;
  content: string;
  contentHash: string;
  storage: StorageBackend;
}

export interface GivenResource {
  id: string;
  slug: string;
  versionIds: string[];
  currentVersionId: string;
  /** Oldest first, as given; the last is the current one. */
  versions: GivenVersion[];
}

/** A Resource with its versions; the last version listed becomes the current one. */
export async function givenResource(
  backend: TestBackend,
  catalog: { id: string },
  fixture: ResourceFixture,
): Promise<GivenResource> {
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
  const given: GivenVersion[] = [];
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
        manifest: JSON.stringify(spec.manifest ?? fixture.manifest ?? {}),
        published_at: status === 'draft' ? null : at,
        superseded_at: status === 'superseded' ? at : null,
        archived_at: status === 'archived' ? at : null,
        created_at: at,
      })
      .execute();
    given.push({ id: versionId, version: spec.version, content: spec.content, contentHash: hash, storage });
  }
  const versionIds = given.map((v) => v.id);
  const currentVersionId = versionIds.at(-1)!;
  if (fixture.withCurrent !== false) {
    await db
      .updateTable('resources')
      .set({ current_version_id: currentVersionId })
      .where('id', '=', id)
      .execute();
  }
  await dataChanged(db);
  return { id, slug: fixture.slug, versionIds, currentVersionId, versions: given };
}

/** Publishes a catalog version pinning the current version of each given resource. */
export async function givenCatalogVersion(
  db: Db,
  catalog: { id: string; slug: string; accountId: string | null },
  version: string,
  resources: readonly GivenResource[],
): Promise<string> {
  const owner = catalog.accountId === null ? 'svc' : 'org';
  const resourcePins: ResourcePin[] = resources.map((resource) => {
    const current = resource.versions.at(-1)!;
    return {
      resourceId: resource.id,
      resourceHumanRef: `${owner}/${catalog.slug}/${resource.slug}`,
      resourceVersionId: current.id,
      version: current.version,
      contentHash: current.contentHash,
    };
  });
  const id = await givenStoredPins(db, catalog.id, version, resourcePins);
  await db.updateTable('catalogs').set({ current_version_id: id }).where('id', '=', catalog.id).execute();
  await dataChanged(db);
  return id;
}

/** Stores a Catalog version of `catalogId` holding `pins` as they are given; returns its id. */
export async function givenStoredPins(
  db: Db,
  catalogId: string,
  version: string,
  pins: readonly ResourcePin[],
): Promise<string> {
  const id = uuidv7();
  const at = tick();
  await db
    .insertInto('catalog_versions')
    .values({
      id,
      catalog_id: catalogId,
      version,
      manifest_hash: sha256Hex(canonicalJson(pins)),
      resource_count: pins.length,
      published_at: at,
      created_at: at,
    })
    .execute();
  await writeStoredPins(db, id, JSON.stringify(pins));
  return id;
}

/** Empties every table, children first, so that one backend can serve many generated states. */
export async function clearStorage(db: Db): Promise<void> {
  await db.updateTable('catalogs').set({ current_version_id: null }).execute();
  await db.updateTable('resources').set({ current_version_id: null }).execute();
  for (const table of [
    'resource_versions',
    'resources',
    'catalog_version_pins',
    'catalog_versions',
    'catalog_facet_values',
    'catalogs',
    'content_blobs',
  ] as const) {
    await db.deleteFrom(table).execute();
  }
  // Accounts that hold the callers' API keys stay, with their keys.
  await db
    .deleteFrom('accounts')
    .where('id', 'not in', (eb) => eb.selectFrom('api_keys').select('account_id'))
    .execute();
  await dataChanged(db);
}

/** Where the backend's object store keeps the content of `hash`: a file path, or a bucket and key. */
function objectLocation(backend: TestBackend, hash: string) {
  const configured = backend.env.PLAYBOOK_CONTENT_STORE!;
  if (backend.objectStore instanceof S3ContentStore) {
    return { kind: 's3', bucket: new URL(configured).host, key: backend.objectStore.keyOf(hash) } as const;
  }
  if (backend.objectStore instanceof DirectoryContentStore) {
    return { kind: 'file', file: path.join(configured, hash.slice(0, 2), hash) } as const;
  }
  throw new Error('unknown object store');
}

/**
 * Replaces the bytes the object store holds for `hash` behind the store's back (null removes them),
 * as a damaged disk or a hand-edited bucket would (D12).
 */
export async function tamperObject(backend: TestBackend, hash: string, body: string | null): Promise<void> {
  const location = objectLocation(backend, hash);
  if (location.kind === 'file') {
    if (body === null) await fs.rm(location.file);
    else await fs.writeFile(location.file, body);
    return;
  }
  const client = s3AdminClientFor(backend);
  try {
    const target = { Bucket: location.bucket, Key: location.key };
    await client.send(
      body === null ? new DeleteObjectCommand(target) : new PutObjectCommand({ ...target, Body: body }),
    );
  } finally {
    client.destroy();
  }
}

/** Replaces the `database-text` content of `hash` in its table (D12). */
export async function tamperDatabaseText(backend: TestBackend, hash: string, body: string): Promise<void> {
  await backend.databases.primary
    .updateTable('content_blobs')
    .set({ body })
    .where('content_hash', '=', hash)
    .execute();
}

/**
 * Every string that would reveal where the backend keeps things: directories, database and store
 * addresses, and the object keys of the given hashes. None may appear in an answer.
 */
export function storageLocations(backend: TestBackend, hashes: readonly string[]): string[] {
  const locations = [backend.workDir, ...Object.values(backend.env).filter((v) => /[/:]/.test(v))];
  for (const hash of hashes) {
    const location = objectLocation(backend, hash);
    locations.push(...(location.kind === 'file' ? [location.file] : [location.bucket, location.key]));
    locations.push(`${hash.slice(0, 2)}/${hash}`);
  }
  return locations;
}
