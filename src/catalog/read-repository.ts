import { PostgresAdapter, type RawBuilder, type SelectQueryBuilder, sql } from 'kysely';
import type { Principal } from '../auth/principal.js';
import type { CatalogTable, Database, Db, ResourceTable, ResourceVersionTable } from '../db/tables.js';
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

/**
 * A Catalog with its current version's columns, except the pins: a catalog version never changes once
 * published, so the service keeps its serialized pins by version and reads them once (see
 * `findCatalogVersionPins`). The pins of a large catalog are most of a list's bytes.
 */
function withCatalogVersion<O>(query: SelectQueryBuilder<Database, 'catalogs', O>) {
  return query
    .leftJoin('catalog_versions as cv', 'cv.id', 'catalogs.current_version_id')
    .select([
      'catalogs.id',
      'catalogs.account_id',
      'catalogs.slug',
      'catalogs.name',
      'catalogs.status',
      'catalogs.description',
      'catalogs.facets',
      'catalogs.created_at',
      'catalogs.updated_at',
      'catalogs.archived_at',
      'cv.id as cv_id',
      'cv.version as cv_version',
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

/**
 * The pins of the given catalog versions, in one query, by version id. The ids come from Catalogs the
 * caller sees (`listCatalogs`), and a visible Catalog's current version is visible with it.
 */
export async function findCatalogVersionPins(
  db: Db,
  versionIds: readonly string[],
): Promise<Map<string, string>> {
  if (versionIds.length === 0) return new Map();
  const rows = await db
    .selectFrom('catalog_versions')
    .select(['id', 'pins'])
    .where('id', 'in', [...versionIds])
    .execute();
  return new Map(rows.map((row) => [row.id, row.pins]));
}

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

/**
 * The columns of a Resource list item, by the names the mappers read them as, in the order of a page
 * row's `columns` text (see `listResources`).
 */
const RESOURCE_LIST_COLUMNS = {
  id: 'resources.id',
  catalog_id: 'resources.catalog_id',
  slug: 'resources.slug',
  kind: 'resources.kind',
  title: 'resources.title',
  status: 'resources.status',
  description: 'resources.description',
  facets: 'resources.facets',
  manifest: 'resources.manifest',
  created_at: 'resources.created_at',
  updated_at: 'resources.updated_at',
  archived_at: 'resources.archived_at',
  catalog_account_id: 'catalogs.account_id',
  catalog_slug: 'catalogs.slug',
  v_id: 'v.id',
  v_version: 'v.version',
  v_content_hash: 'v.content_hash',
  v_content_size_bytes: 'v.content_size_bytes',
  v_media_type: 'v.media_type',
  v_storage_backend: 'v.storage_backend',
  v_status: 'v.status',
  v_published_at: 'v.published_at',
  v_superseded_at: 'v.superseded_at',
  v_archived_at: 'v.archived_at',
} as const;

/** The type of a column, from the table types; `v` is left-joined, so each of its columns may be null. */
type ColumnValue<C extends string> = C extends `resources.${infer K extends keyof ResourceTable}`
  ? ResourceTable[K]
  : C extends `catalogs.${infer K extends keyof CatalogTable}`
    ? CatalogTable[K]
    : C extends `v.${infer K extends keyof ResourceVersionTable}`
      ? ResourceVersionTable[K] | null
      : never;

/** A Resource list item's row, with its current version's summary (none when that is not visible). */
export type ResourceListRow = {
  [Name in keyof typeof RESOURCE_LIST_COLUMNS]: ColumnValue<(typeof RESOURCE_LIST_COLUMNS)[Name]>;
};

const RESOURCE_LIST_NAMES = Object.keys(RESOURCE_LIST_COLUMNS) as (keyof ResourceListRow)[];

/** The row a page row's `columns` text holds. */
export function resourceListRowOf(columns: string): ResourceListRow {
  const values = JSON.parse(columns) as unknown[];
  const row: Record<string, unknown> = {};
  RESOURCE_LIST_NAMES.forEach((name, index) => {
    row[name] = values[index] ?? null;
  });
  return row as ResourceListRow;
}

/** Queries are handed a bare `Kysely`; its adapter is the one reliable sign of the dialect. */
function isPostgres(db: Db): boolean {
  return db.getExecutor().adapter instanceof PostgresAdapter;
}

/** Columns as one JSON array text, built by the database (PostgreSQL names the function differently). */
function jsonArrayText(db: Db, columns: readonly string[]): RawBuilder<string> {
  const values = sql.join(columns.map((column) => sql.ref(column)));
  return isPostgres(db) ? sql<string>`json_build_array(${values})::text` : sql<string>`json_array(${values})`;
}

/** A row of a page of Resources: the Resource's id and slug, and its list item's columns as text. */
export interface ResourcePageRow {
  /** What a cached list item is kept by. */
  readonly id: string;
  /** What the page is ordered by. */
  readonly slug: string;
  /** Every column of the list item, as a JSON array text (`resourceListRowOf` reads it). */
  readonly columns: string;
}

/**
 * One page of a Catalog's Resources by slug, each with its current version's summary.
 *
 * Each row comes as one text rather than two dozen values: building row objects was most of a page's
 * time (better-sqlite3 makes one property per column), while one string per row is four times cheaper
 * to read, is compared at once with the state a cached list item was made from, and is parsed only
 * for a row that changed.
 */
export async function listResources(
  db: Db,
  principal: Principal,
  catalogId: string,
  kinds: readonly ResourceKind[],
  window: PageWindow,
): Promise<ResourcePageRow[]> {
  return visibleResourcesOf(db, principal, catalogId, kinds)
    .leftJoin('resource_versions as v', (join) =>
      join.onRef('v.id', '=', 'resources.current_version_id').on(currentVersionVisible),
    )
    .select(['resources.id', 'resources.slug'])
    .select(jsonArrayText(db, Object.values(RESOURCE_LIST_COLUMNS)).as('columns'))
    .orderBy('resources.slug')
    .offset(window.offset)
    .limit(window.limit)
    .execute();
}

/**
 * The columns of a Resource detail: those of a list item (`RESOURCE_LIST_COLUMNS`), read as values since
 * there is one row, and `findResource` adds the version's manifest.
 */
const resourceColumns = [
  'resources.id',
  'resources.catalog_id',
  'resources.slug',
  'resources.kind',
  'resources.title',
  'resources.status',
  'resources.description',
  'resources.facets',
  'resources.manifest',
  'resources.created_at',
  'resources.updated_at',
  'resources.archived_at',
] as const;

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
    .select(resourceColumns)
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

/**
 * One visible version, with the facts of its Resource's plan gate (as `findResourceGate`), so that
 * the version operation answers in one query when the version is there to answer.
 */
export async function findVersion(db: Db, principal: Principal, resourceId: string, versionId: string) {
  return visibleVersionsOf(db, principal, resourceId)
    .selectAll('resource_versions')
    .select(['resources.facets as resource_facets', 'catalogs.account_id as catalog_account_id'])
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
