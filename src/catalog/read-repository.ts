import { type SelectQueryBuilder, sql } from 'kysely';
import type { Principal } from '../auth/principal.js';
import type { Database, Db } from '../db/tables.js';
import type { SourceScope } from '../schemas/common.js';
import type { ResourceKind } from '../schemas/playbook.js';
import {
  catalogVisibleTo,
  currentVersionVisible,
  resourceVisibleTo,
  versionVisibleTo,
} from './visibility.js';

/**
 * The queries behind the read operations: one per page plus one count, never one per item. Each
 * takes the caller's principal and filters through `visibility.ts`.
 */

export interface PageWindow {
  readonly offset: number;
  readonly limit: number;
}

export interface CatalogFilters {
  readonly sourceScopes?: readonly SourceScope[];
  readonly capability?: string;
}

function filteredCatalogs(db: Db, principal: Principal, filters: CatalogFilters) {
  let query = db.selectFrom('catalogs').where(catalogVisibleTo(principal));
  const scopes = new Set(filters.sourceScopes ?? []);
  if (scopes.size === 1) {
    query = query.where('catalogs.account_id', scopes.has('svc') ? 'is' : 'is not', null);
  }
  if (filters.capability !== undefined) {
    const capability = filters.capability;
    query = query.where(({ exists, selectFrom }) =>
      exists(
        selectFrom('catalog_facet_values as f')
          .select(sql`1`.as('one'))
          .whereRef('f.catalog_id', '=', 'catalogs.id')
          .where('f.facet', '=', 'capability')
          .where('f.value', '=', capability),
      ),
    );
  }
  return query;
}

export async function countCatalogs(db: Db, principal: Principal, filters: CatalogFilters): Promise<number> {
  const row = await filteredCatalogs(db, principal, filters)
    .select((eb) => eb.fn.countAll().as('total'))
    .executeTakeFirstOrThrow();
  return Number(row.total);
}

function withCatalogVersion<O>(query: SelectQueryBuilder<Database, 'catalogs', O>) {
  return query
    .leftJoin('catalog_versions as cv', 'cv.id', 'catalogs.current_version_id')
    .selectAll('catalogs')
    .select([
      'cv.id as cv_id',
      'cv.version as cv_version',
      'cv.pins as cv_pins',
      'cv.manifest_hash as cv_manifest_hash',
      'cv.resource_count as cv_resource_count',
      'cv.published_at as cv_published_at',
    ]);
}

/**
 * Service-owned Catalogs first, then the account's, each by slug (D3). Slugs compare byte by byte on
 * every dialect: SQLite does so by default, and on PostgreSQL migration 0003 gives every text column
 * the "C" collation.
 */
export async function listCatalogs(
  db: Db,
  principal: Principal,
  filters: CatalogFilters,
  window: PageWindow,
) {
  return withCatalogVersion(filteredCatalogs(db, principal, filters))
    .orderBy(sql`case when catalogs.account_id is null then 0 else 1 end`)
    .orderBy('catalogs.slug')
    .offset(window.offset)
    .limit(window.limit)
    .execute();
}
export type CatalogWithVersionRow = Awaited<ReturnType<typeof listCatalogs>>[number];

/** The visible Catalog `owner/slug` names; `org` is always the caller's own account (D5). */
export async function findCatalog(db: Db, principal: Principal, owner: 'svc' | 'org', slug: string) {
  if (owner === 'org' && principal.accountId === null) return undefined;
  return db
    .selectFrom('catalogs')
    .select(['catalogs.id', 'catalogs.account_id', 'catalogs.slug'])
    .where(catalogVisibleTo(principal))
    .where('catalogs.slug', '=', slug)
    .where('catalogs.account_id', owner === 'svc' ? 'is' : '=', owner === 'svc' ? null : principal.accountId)
    .executeTakeFirst();
}

function visibleResourcesOf(db: Db, principal: Principal, catalogId: string, kinds: readonly ResourceKind[]) {
  let query = db
    .selectFrom('resources')
    .innerJoin('catalogs', 'catalogs.id', 'resources.catalog_id')
    .where('resources.catalog_id', '=', catalogId)
    .where(resourceVisibleTo(principal));
  if (kinds.length > 0) query = query.where('resources.kind', 'in', [...kinds]);
  return query;
}

export async function countResources(
  db: Db,
  principal: Principal,
  catalogId: string,
  kinds: readonly ResourceKind[],
): Promise<number> {
  const row = await visibleResourcesOf(db, principal, catalogId, kinds)
    .select((eb) => eb.fn.countAll().as('total'))
    .executeTakeFirstOrThrow();
  return Number(row.total);
}

const versionSummaryColumns = [
  'v.id as v_id',
  'v.version as v_version',
  'v.content_hash as v_content_hash',
  'v.content_size_bytes as v_content_size_bytes',
  'v.media_type as v_media_type',
  'v.storage_backend as v_storage_backend',
  'v.status as v_status',
  'v.published_at as v_published_at',
  'v.superseded_at as v_superseded_at',
  'v.archived_at as v_archived_at',
] as const;

/** One page of a Catalog's Resources by slug, each with its current version's summary. */
export async function listResources(
  db: Db,
  principal: Principal,
  catalogId: string,
  kinds: readonly ResourceKind[],
  window: PageWindow,
) {
  return visibleResourcesOf(db, principal, catalogId, kinds)
    .leftJoin('resource_versions as v', (join) =>
      join.onRef('v.id', '=', 'resources.current_version_id').on(currentVersionVisible),
    )
    .selectAll('resources')
    .select(['catalogs.account_id as catalog_account_id', 'catalogs.slug as catalog_slug'])
    .select(versionSummaryColumns)
    .orderBy('resources.slug')
    .offset(window.offset)
    .limit(window.limit)
    .execute();
}
export type ResourceListRow = Awaited<ReturnType<typeof listResources>>[number];

/**
 * One visible Resource with its current version in full (content excepted); none when it has no
 * visible current version, since a detail always carries one.
 */
export async function findResource(db: Db, principal: Principal, resourceId: string) {
  return db
    .selectFrom('resources')
    .innerJoin('catalogs', 'catalogs.id', 'resources.catalog_id')
    .innerJoin('resource_versions as v', (join) =>
      join.onRef('v.id', '=', 'resources.current_version_id').on(currentVersionVisible),
    )
    .selectAll('resources')
    .select(['catalogs.account_id as catalog_account_id', 'catalogs.slug as catalog_slug'])
    .select(versionSummaryColumns)
    .select('v.manifest as v_manifest')
    .where('resources.id', '=', resourceId)
    .where(resourceVisibleTo(principal))
    .executeTakeFirst();
}
export type ResourceDetailRow = NonNullable<Awaited<ReturnType<typeof findResource>>>;

/** The facts every version operation checks first: is the Resource visible, and is it plan-gated. */
export async function findResourceGate(db: Db, principal: Principal, resourceId: string) {
  return db
    .selectFrom('resources')
    .innerJoin('catalogs', 'catalogs.id', 'resources.catalog_id')
    .select(['resources.id', 'resources.facets', 'catalogs.account_id as catalog_account_id'])
    .where('resources.id', '=', resourceId)
    .where(resourceVisibleTo(principal))
    .executeTakeFirst();
}

function visibleVersionsOf(db: Db, principal: Principal, resourceId: string) {
  return db
    .selectFrom('resource_versions')
    .innerJoin('resources', 'resources.id', 'resource_versions.resource_id')
    .innerJoin('catalogs', 'catalogs.id', 'resources.catalog_id')
    .where('resource_versions.resource_id', '=', resourceId)
    .where(versionVisibleTo(principal));
}

export async function findVersion(db: Db, principal: Principal, resourceId: string, versionId: string) {
  return visibleVersionsOf(db, principal, resourceId)
    .selectAll('resource_versions')
    .where('resource_versions.id', '=', versionId)
    .executeTakeFirst();
}

export async function countVersions(db: Db, principal: Principal, resourceId: string): Promise<number> {
  const row = await visibleVersionsOf(db, principal, resourceId)
    .select((eb) => eb.fn.countAll().as('total'))
    .executeTakeFirstOrThrow();
  return Number(row.total);
}

/** A Resource's versions, newest first (D16). */
export async function listVersions(db: Db, principal: Principal, resourceId: string, window: PageWindow) {
  return visibleVersionsOf(db, principal, resourceId)
    .selectAll('resource_versions')
    .orderBy('resource_versions.created_at', 'desc')
    .orderBy('resource_versions.id', 'desc')
    .offset(window.offset)
    .limit(window.limit)
    .execute();
}
