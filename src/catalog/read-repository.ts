import { type Expression, type ExpressionBuilder, type SqlBool, sql } from 'kysely';
import type { Principal } from '../auth/principal.js';
import { everyColumnOf, PreparedQuery } from '../db/prepared-query.js';
import {
  type CatalogRow,
  type CatalogVersionRow,
  type Database,
  type Db,
  dialectOf,
  type ResourceRow,
  type ResourceVersionRow,
} from '../db/tables.js';
import type { PageWindow } from '../foundation/paging.js';
import type { SourceScope } from '../schemas/common.js';
import type { ResourceKind } from '../schemas/playbook.js';
import {
  type CatalogOwner,
  catalogAdmitted,
  catalogVisibleTo,
  currentVersionVisible,
  currentVersionVisibleIn,
  ownerOf,
  resourceVisibleIn,
  resourceVisibleTo,
  type Viewer,
  versionVisibleTo,
} from './visibility.js';

/**
 * The queries behind the read operations: one per page plus one count, never one per item. Each
 * takes the caller's principal (or a Catalog found through it) and filters through `visibility.ts`.
 * Rows come back typed by the table types; `mappers.ts` turns them into answers.
 */

/** `<alias>.<column> as <alias>_<column>` for each column: a joined row's columns beside another's. */
export function prefixed<A extends string, const C extends readonly string[]>(alias: A, columns: C) {
  return columns.map((column) => `${alias}.${column} as ${alias}_${column}`) as {
    [K in keyof C]: `${A}.${C[K]} as ${A}_${C[K]}`;
  };
}

/** The columns of one table in a joined row. */
export function pick<T, K extends keyof T>(row: T, columns: readonly K[]): Pick<T, K> {
  const out = {} as Pick<T, K>;
  for (const column of columns) out[column] = row[column];
  return out;
}

/** The columns prefixed by `prefixed(alias, …)`, read back under their own names. */
export function unprefixed<T>(
  row: Record<string, unknown>,
  alias: string,
  columns: readonly (keyof T & string)[],
): T {
  const out: Record<string, unknown> = {};
  for (const column of columns) out[column] = row[`${alias}_${column}`];
  return out as T;
}

// ---------------------------------------------------------------------------------------------------
// Catalogs

export const CATALOG_COLUMNS = [
  'id',
  'account_id',
  'slug',
  'name',
  'status',
  'description',
  'facets',
  'current_version_id',
  'created_at',
  'updated_at',
  'archived_at',
] as const satisfies readonly (keyof CatalogRow)[];

/** A current version's columns but its pins, which are stored apart (stored-pins.ts). */
export const CATALOG_VERSION_COLUMNS = [
  'id',
  'version',
  'manifest_hash',
  'resource_count',
  'published_at',
] as const satisfies readonly (keyof CatalogVersionRow)[];
export type CurrentCatalogVersionRow = Pick<CatalogVersionRow, (typeof CATALOG_VERSION_COLUMNS)[number]>;

/** A Catalog, with its current version (but not that version's pins) when it has one. */
export interface CatalogListRow {
  readonly catalog: CatalogRow;
  readonly currentVersion: CurrentCatalogVersionRow | undefined;
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
 * Service-owned Catalogs first, then the account's, each by slug (D3). Slugs compare byte by byte on
 * every dialect: SQLite does so by default, and on PostgreSQL migration 0003 gives every text column
 * the "C" collation. A page of Catalogs whose current versions pin 100,000 Resources is a few rows
 * here: their pins, tens of megabytes of text, are read apart as they are needed (stored-pins.ts).
 */
export async function listCatalogs(
  db: Db,
  principal: Principal,
  filters: CatalogFilters,
  window: PageWindow,
): Promise<CatalogListRow[]> {
  const rows = await filteredCatalogs(db, principal, filters)
    .leftJoin('catalog_versions as cv', 'cv.id', 'catalogs.current_version_id')
    .selectAll('catalogs')
    .select(prefixed('cv', CATALOG_VERSION_COLUMNS))
    .orderBy(sql`case when catalogs.account_id is null then 0 else 1 end`)
    .orderBy('catalogs.slug')
    .offset(window.offset)
    .limit(window.limit)
    .execute();
  return rows.map(catalogListRow);
}

function catalogListRow(row: CatalogRow & Record<`cv_${string}`, unknown>): CatalogListRow {
  return {
    catalog: pick(row, CATALOG_COLUMNS),
    currentVersion:
      row.cv_id === null
        ? undefined
        : unprefixed<CurrentCatalogVersionRow>(row, 'cv', CATALOG_VERSION_COLUMNS),
  };
}

/** The Catalog a list of Resources names, found visible to the caller: its id, whose it is, its slug. */
export interface VisibleCatalog {
  readonly id: string;
  readonly account_id: string | null;
  readonly slug: string;
}

/**
 * The Catalog `owner/slug` names to the caller, when it is visible: `org` is always the caller's own
 * account (D5), so a caller of no account has none, and another account's Catalog of the same slug
 * is never it.
 */
function catalogNamed(principal: Viewer, owner: 'svc' | 'org', slug: string) {
  return (eb: ExpressionBuilder<Database, 'catalogs'>): Expression<SqlBool> =>
    owner === 'org' && principal.accountId === null
      ? eb.lit(false)
      : eb.and([
          catalogVisibleTo(principal)(eb),
          eb('catalogs.slug', '=', slug),
          owner === 'svc'
            ? eb('catalogs.account_id', 'is', null)
            : eb('catalogs.account_id', '=', principal.accountId),
        ]);
}

/** The visible Catalog `owner/slug` names; `org` is always the caller's own account (D5). */
export async function findCatalog(
  db: Db,
  principal: Principal,
  owner: 'svc' | 'org',
  slug: string,
): Promise<VisibleCatalog | undefined> {
  if (owner === 'org' && principal.accountId === null) return undefined;
  return db
    .selectFrom('catalogs')
    .select(['catalogs.id', 'catalogs.account_id', 'catalogs.slug'])
    .where(catalogNamed(principal, owner, slug))
    .executeTakeFirst();
}

/** The visible Catalog `owner/slug` names, whole, with its current version (D29). */
export async function findCatalogByRef(
  db: Db,
  principal: Principal,
  owner: 'svc' | 'org',
  slug: string,
): Promise<CatalogListRow | undefined> {
  if (owner === 'org' && principal.accountId === null) return undefined;
  const row = await db
    .selectFrom('catalogs')
    .leftJoin('catalog_versions as cv', 'cv.id', 'catalogs.current_version_id')
    .selectAll('catalogs')
    .select(prefixed('cv', CATALOG_VERSION_COLUMNS))
    .where(catalogNamed(principal, owner, slug))
    .executeTakeFirst();
  return row && catalogListRow(row);
}

// ---------------------------------------------------------------------------------------------------
// Resources

/** What a Resource's answers show of its current version, beside the Resource (no manifest, no content). */
export const VERSION_SUMMARY_COLUMNS = [
  'id',
  'version',
  'content_hash',
  'content_size_bytes',
  'media_type',
  'storage_backend',
  'status',
  'published_at',
  'superseded_at',
  'archived_at',
] as const satisfies readonly (keyof ResourceVersionRow)[];
export type VersionSummaryRow = Pick<ResourceVersionRow, (typeof VERSION_SUMMARY_COLUMNS)[number]>;
const VERSION_DETAIL_COLUMNS = [...VERSION_SUMMARY_COLUMNS, 'manifest'] as const;
export type VersionDetailRow = Pick<ResourceVersionRow, (typeof VERSION_DETAIL_COLUMNS)[number]>;

export const RESOURCE_COLUMNS = everyColumnOf<ResourceRow>()([
  'id',
  'catalog_id',
  'slug',
  'kind',
  'title',
  'status',
  'description',
  'facets',
  'manifest',
  'current_version_id',
  'created_at',
  'updated_at',
  'archived_at',
]);

/** A Resource, whose Catalog it is in, and its current version when that is visible. */
export interface ResourceListRow {
  readonly resource: ResourceRow;
  readonly catalogAccountId: string | null;
  readonly catalogSlug: string;
  readonly currentVersion: VersionSummaryRow | undefined;
}

/** A Resource detail's row: its current version always there, with its manifest. */
export interface ResourceDetailRow extends ResourceListRow {
  readonly currentVersion: VersionDetailRow;
  /**
   * The content, when the database holds it (`database-text`), read with the row: a cold read of a
   * detail asks nothing of the content store then. Not yet checked against its hash (D12).
   */
  readonly storedContent?: string | null;
}

/** The Resources of one visible Catalog that its owner's callers see, optionally of some kinds only. */
function resourcesOf(db: Db, catalog: VisibleCatalog, kinds: readonly ResourceKind[]) {
  let query = db
    .selectFrom('resources')
    .where('resources.catalog_id', '=', catalog.id)
    .where(resourceVisibleIn(ownerOf(catalog)));
  if (kinds.length > 0) query = query.where('resources.kind', 'in', [...kinds]);
  return query;
}

/** Every how many Resources of a list a position is marked. */
export const POSITION_MARK_EVERY = 100;

/**
 * Where the pages of one list of a Catalog's Resources begin: how many Resources the list holds, and
 * the slug at every `POSITION_MARK_EVERY`th position. With them a page at any depth is found by seeking
 * to a slug and skipping fewer than `POSITION_MARK_EVERY` entries, so the last page of a large
 * Catalog costs what the first does. They stay right until the data changes (the read path keeps them
 * with its answers).
 */
export interface ListPositions {
  readonly total: number;
  /** Every how many Resources a position is marked. */
  readonly every: number;
  readonly marks: readonly string[];
}

/**
 * Its marked slugs in one statement that walks the list's index (migration 0004) from mark to mark,
 * seeking to each and skipping `every - 1` entries, then its length from the marks and the last
 * stretch. As costly as counting the list once, and then no page of it costs more than another.
 */
export async function resourcePositions(
  db: Db,
  catalog: VisibleCatalog,
  kinds: readonly ResourceKind[],
  every = POSITION_MARK_EVERY,
): Promise<ListPositions> {
  const first = resourcesOf(db, catalog, kinds).select('resources.slug').orderBy('resources.slug').limit(1);
  const next = resourcesOf(db, catalog, kinds)
    .select('resources.slug')
    .where('resources.slug', '>', sql.ref<string>('marks.slug'))
    .orderBy('resources.slug')
    .offset(every - 1)
    .limit(1);
  const { rows } = await sql<{ slug: string }>`
    with recursive marks(slug) as (
      select (${first})
      union all
      select (${next}) from marks where marks.slug is not null
    )
    select slug from marks where slug is not null`.execute(db);
  const marks = rows.map((row) => row.slug);
  const last = marks.at(-1);
  if (last === undefined) return { total: 0, every, marks };
  const { rest } = await resourcesOf(db, catalog, kinds)
    .where('resources.slug', '>=', last)
    .select((eb) => eb.fn.countAll().as('rest'))
    .executeTakeFirstOrThrow();
  return { total: (marks.length - 1) * every + Number(rest), every, marks };
}

/**
 * One page of a visible Catalog's Resources by slug, each with its current version's summary.
 *
 * Two statements, each of which an index serves in order with no sort: the page's ids, from the
 * index that holds catalog, slug, status and id (migration 0004), found from the nearest marked
 * position before the page (`positions`); then the page's rows, by primary key.
 */
export async function listResources(
  db: Db,
  catalog: VisibleCatalog,
  kinds: readonly ResourceKind[],
  window: PageWindow,
  positions: ListPositions,
): Promise<ResourceListRow[]> {
  const mark = Math.min(Math.floor(window.offset / positions.every), positions.marks.length - 1);
  if (mark < 0) return [];
  const page = await resourcesOf(db, catalog, kinds)
    .where('resources.slug', '>=', positions.marks[mark]!)
    .select('resources.id')
    .orderBy('resources.slug')
    .offset(window.offset - mark * positions.every)
    .limit(window.limit)
    .execute();
  if (page.length === 0) return [];
  const ids = page.map((row) => row.id);
  // The ids passed the visibility rules above and the Catalog is known: its rows need no join with it.
  const rows = await db
    .selectFrom('resources')
    .leftJoin('resource_versions as v', (on) =>
      on.onRef('v.id', '=', 'resources.current_version_id').on(currentVersionVisibleIn(ownerOf(catalog))),
    )
    .selectAll('resources')
    .select(prefixed('v', VERSION_SUMMARY_COLUMNS))
    .where('resources.id', 'in', ids)
    .execute();
  const position = new Map(ids.map((id, index) => [id, index]));
  rows.sort((a, b) => position.get(a.id)! - position.get(b.id)!);
  return rows.map((row) => ({
    resource: pick(row, RESOURCE_COLUMNS),
    catalogAccountId: catalog.account_id,
    catalogSlug: catalog.slug,
    currentVersion:
      row.v_id === null ? undefined : unprefixed<VersionSummaryRow>(row, 'v', VERSION_SUMMARY_COLUMNS),
  }));
}

/** Whose view a prepared query is built for: one with an account compares it as a value. */
type ViewShape = 'account' | 'none';

const viewShape = (principal: Viewer): ViewShape => (principal.accountId === null ? 'none' : 'account');

/** The viewer a prepared query of `shape` is built for. */
const viewerOf = (shape: ViewShape, accountId: string): Viewer => ({
  accountId: shape === 'none' ? null : accountId,
});

/**
 * A visible Resource with its current version in full, joined in one statement: its database-text
 * content comes with its row (checked against its hash when loaded, D12).
 */
function resourceDetailQuery(
  db: Db,
  viewer: Viewer,
  which: (eb: ExpressionBuilder<Database, 'catalogs' | 'resources'>) => Expression<SqlBool>,
) {
  return db
    .selectFrom('resources')
    .innerJoin('catalogs', 'catalogs.id', 'resources.catalog_id')
    .innerJoin('resource_versions as v', (on) =>
      on.onRef('v.id', '=', 'resources.current_version_id').on(currentVersionVisible),
    )
    .leftJoin('content_blobs as cb', (on) =>
      on.onRef('cb.content_hash', '=', 'v.content_hash').on('v.storage_backend', '=', 'database-text'),
    )
    .select(RESOURCE_COLUMNS.map((column) => `resources.${column}` as const))
    .select(['catalogs.account_id as catalog_account_id', 'catalogs.slug as catalog_slug'])
    .select(prefixed('v', VERSION_DETAIL_COLUMNS))
    .select('cb.body as stored_content')
    .where(which)
    .where(resourceVisibleTo(viewer));
}

/**
 * The detail reads, built once: a read that misses the answers in memory lands on any of a million
 * Resources, and building the statement cost a third of what running it did (D30).
 */
const DETAIL_BY_ID = new PreparedQuery(['accountId', 'resourceId'], (db, slot, shape: ViewShape) =>
  resourceDetailQuery(db, viewerOf(shape, slot.accountId), (eb) => eb('resources.id', '=', slot.resourceId)),
);

const DETAIL_BY_REF = new PreparedQuery(
  ['accountId', 'catalogSlug', 'resourceSlug'],
  (db, slot, shape: `${'svc' | 'org'}:${ViewShape}`) => {
    const [owner, view] = shape.split(':') as ['svc' | 'org', ViewShape];
    const viewer = viewerOf(view, slot.accountId);
    return resourceDetailQuery(db, viewer, (eb) =>
      eb.and([
        catalogNamed(viewer, owner, slot.catalogSlug)(eb),
        eb('resources.slug', '=', slot.resourceSlug),
      ]),
    );
  },
);

/**
 * One visible Resource with its current version in full (content excepted); none when it has no
 * visible current version, since a detail always carries one.
 */
export async function findResource(
  db: Db,
  principal: Viewer,
  resourceId: string,
): Promise<ResourceDetailRow | undefined> {
  if (searchesByKey(db)) {
    return inOneSnapshot(db, async (trx) => {
      const [resource] = await CATALOG_OF_RESOURCE.run(trx, 'any', { resourceId });
      if (!resource) return undefined;
      const [catalog] = await VISIBLE_CATALOG_BY_ID.run(trx, viewShape(principal), {
        accountId: principal.accountId,
        catalogId: resource.catalog_id,
      });
      if (!catalog || !catalogAdmitted(principal, catalog.account_id, catalog.slug)) return undefined;
      const [found] = await RESOURCE_BY_ID_IN_CATALOG.run(trx, ownerOf(catalog), {
        catalogId: catalog.id,
        resourceId,
      });
      return found && detailOfResource(trx, catalog, found);
    });
  }
  const rows = await DETAIL_BY_ID.run(db, viewShape(principal), {
    accountId: principal.accountId,
    resourceId,
  });
  return admittedTo(principal, detailRowOf(rows[0]));
}

/**
 * A detail a statement prepared for every caller found, kept when the caller's key admits its Catalog
 * (D32): such a statement filters by the caller's account alone.
 */
function admittedTo(principal: Viewer, row: ResourceDetailRow | undefined): ResourceDetailRow | undefined {
  return row && catalogAdmitted(principal, row.catalogAccountId, row.catalogSlug) ? row : undefined;
}

/**
 * The Catalog of the Resource `resourceId`, whoever may see it: its account (null for the service's)
 * and its slug, neither of which ever changes. None when the Resource does not exist.
 */
export async function catalogOfResource(
  db: Db,
  resourceId: string,
): Promise<{ accountId: string | null; slug: string } | undefined> {
  const [row] = await CATALOG_PLACE_OF_RESOURCE.run(db, 'any', { resourceId });
  return row && { accountId: row.account_id, slug: row.slug };
}

const CATALOG_PLACE_OF_RESOURCE = new PreparedQuery(['resourceId'], (db, slot, _shape: 'any') =>
  db
    .selectFrom('resources')
    .innerJoin('catalogs', 'catalogs.id', 'resources.catalog_id')
    .select(['catalogs.account_id', 'catalogs.slug'])
    .where('resources.id', '=', slot.resourceId),
);

/** The account of the Catalog of the Resource `resourceId` (null for the service's); none when absent. */
export async function ownerOfResource(
  db: Db,
  resourceId: string,
): Promise<{ accountId: string | null } | undefined> {
  const row = await db
    .selectFrom('resources')
    .innerJoin('catalogs', 'catalogs.id', 'resources.catalog_id')
    .select('catalogs.account_id')
    .where('resources.id', '=', resourceId)
    .executeTakeFirst();
  return row && { accountId: row.account_id };
}

/** `findResource` of the Resource named `owner/catalogSlug/resourceSlug` (D29). */
export async function findResourceByRef(
  db: Db,
  principal: Principal,
  owner: 'svc' | 'org',
  catalogSlug: string,
  resourceSlug: string,
): Promise<ResourceDetailRow | undefined> {
  if (owner === 'org' && principal.accountId === null) return undefined;
  if (searchesByKey(db)) {
    return inOneSnapshot(db, async (trx) => {
      const [catalog] = await VISIBLE_CATALOG_BY_SLUG.run(trx, `${owner}:${viewShape(principal)}`, {
        accountId: principal.accountId,
        catalogSlug,
      });
      if (!catalog || !catalogAdmitted(principal, catalog.account_id, catalog.slug)) return undefined;
      const [found] = await RESOURCE_BY_SLUG_IN_CATALOG.run(trx, ownerOf(catalog), {
        catalogId: catalog.id,
        resourceSlug,
      });
      return found && detailOfResource(trx, catalog, found);
    });
  }
  const rows = await DETAIL_BY_REF.run(db, `${owner}:${viewShape(principal)}`, {
    accountId: principal.accountId,
    catalogSlug,
    resourceSlug,
  });
  return admittedTo(principal, detailRowOf(rows[0]));
}

/**
 * Whether a detail is read a table at a time rather than joined (D30). On SQLite each of its reads is
 * a search by key, and four of them cost half what the one statement joining the same four tables
 * did (measured over a million Resources: 45-60 µs against 115-150). PostgreSQL keeps the join: there
 * each statement is a round trip.
 */
function searchesByKey(db: Db): boolean {
  return dialectOf(db) === 'sqlite';
}

/**
 * `read`'s statements in one read transaction, so that they see the database as one commit left it
 * however the writer's commits fall between them (on SQLite the writer commits on a thread of its own).
 */
function inOneSnapshot<T>(db: Db, read: (trx: Db) => Promise<T>): Promise<T> {
  return db.transaction().execute(read);
}

const CATALOG_OF_RESOURCE = new PreparedQuery(['resourceId'], (db, slot, _shape: 'any') =>
  db.selectFrom('resources').select('resources.catalog_id').where('resources.id', '=', slot.resourceId),
);

const VISIBLE_CATALOG_COLUMNS = ['catalogs.id', 'catalogs.account_id', 'catalogs.slug'] as const;

const VISIBLE_CATALOG_BY_ID = new PreparedQuery(['accountId', 'catalogId'], (db, slot, shape: ViewShape) =>
  db
    .selectFrom('catalogs')
    .select(VISIBLE_CATALOG_COLUMNS)
    .where('catalogs.id', '=', slot.catalogId)
    .where(catalogVisibleTo(viewerOf(shape, slot.accountId))),
);

const VISIBLE_CATALOG_BY_SLUG = new PreparedQuery(
  ['accountId', 'catalogSlug'],
  (db, slot, shape: `${'svc' | 'org'}:${ViewShape}`) => {
    const [owner, view] = shape.split(':') as ['svc' | 'org', ViewShape];
    return db
      .selectFrom('catalogs')
      .select(VISIBLE_CATALOG_COLUMNS)
      .where(catalogNamed(viewerOf(view, slot.accountId), owner, slot.catalogSlug));
  },
);

/** A Resource of a Catalog found visible, owned by `owner`, that `which` names. */
function resourceInCatalog(
  db: Db,
  owner: CatalogOwner,
  catalogId: string,
  which: (eb: ExpressionBuilder<Database, 'resources'>) => Expression<SqlBool>,
) {
  return db
    .selectFrom('resources')
    .select(RESOURCE_COLUMNS.map((column) => `resources.${column}` as const))
    .where('resources.catalog_id', '=', catalogId)
    .where(which)
    .where(resourceVisibleIn(owner));
}

const RESOURCE_BY_ID_IN_CATALOG = new PreparedQuery(
  ['catalogId', 'resourceId'],
  (db, slot, owner: CatalogOwner) =>
    resourceInCatalog(db, owner, slot.catalogId, (eb) => eb('resources.id', '=', slot.resourceId)),
);

const RESOURCE_BY_SLUG_IN_CATALOG = new PreparedQuery(
  ['catalogId', 'resourceSlug'],
  (db, slot, owner: CatalogOwner) =>
    resourceInCatalog(db, owner, slot.catalogId, (eb) => eb('resources.slug', '=', slot.resourceSlug)),
);

const CURRENT_VERSION_IN_CATALOG = new PreparedQuery(['versionId'], (db, slot, owner: CatalogOwner) =>
  db
    .selectFrom('resource_versions as v')
    .select(VERSION_DETAIL_COLUMNS.map((column) => `v.${column}` as const))
    .where('v.id', '=', slot.versionId)
    .where(currentVersionVisibleIn(owner)),
);

const STORED_CONTENT = new PreparedQuery(['contentHash'], (db, slot, _shape: 'any') =>
  db
    .selectFrom('content_blobs')
    .select('content_blobs.body')
    .where('content_blobs.content_hash', '=', slot.contentHash),
);

/**
 * The detail of a Resource found visible in a Catalog found visible, the rest of it a table at a time:
 * its current version, and its content when the database holds it.
 */
async function detailOfResource(
  trx: Db,
  catalog: VisibleCatalog,
  resource: ResourceRow,
): Promise<ResourceDetailRow | undefined> {
  if (resource.current_version_id === null) return undefined;
  const [currentVersion] = await CURRENT_VERSION_IN_CATALOG.run(trx, ownerOf(catalog), {
    versionId: resource.current_version_id,
  });
  if (!currentVersion) return undefined;
  const [stored] =
    currentVersion.storage_backend === 'database-text'
      ? await STORED_CONTENT.run(trx, 'any', { contentHash: currentVersion.content_hash })
      : [];
  return {
    resource,
    catalogAccountId: catalog.account_id,
    catalogSlug: catalog.slug,
    currentVersion,
    storedContent: stored?.body ?? null,
  };
}

function detailRowOf(
  row: Awaited<ReturnType<ReturnType<typeof resourceDetailQuery>['executeTakeFirst']>>,
): ResourceDetailRow | undefined {
  if (!row) return undefined;
  return {
    resource: pick(row, RESOURCE_COLUMNS),
    catalogAccountId: row.catalog_account_id,
    catalogSlug: row.catalog_slug,
    currentVersion: unprefixed<VersionDetailRow>(row, 'v', VERSION_DETAIL_COLUMNS),
    storedContent: row.stored_content,
  };
}

// ---------------------------------------------------------------------------------------------------
// Resource Versions

/** The facts every version operation checks first: is the Resource visible, and is it plan-gated. */
export interface ResourceGate {
  readonly id: string;
  readonly facets: string | null;
  readonly catalogAccountId: string | null;
}

export async function findResourceGate(
  db: Db,
  principal: Principal,
  resourceId: string,
): Promise<ResourceGate | undefined> {
  const row = await db
    .selectFrom('resources')
    .innerJoin('catalogs', 'catalogs.id', 'resources.catalog_id')
    .select(['resources.id', 'resources.facets', 'catalogs.account_id'])
    .where('resources.id', '=', resourceId)
    .where(resourceVisibleTo(principal))
    .executeTakeFirst();
  return row && { id: row.id, facets: row.facets, catalogAccountId: row.account_id };
}

function visibleVersionsOf(db: Db, principal: Principal, resourceId: string) {
  return db
    .selectFrom('resource_versions')
    .innerJoin('resources', 'resources.id', 'resource_versions.resource_id')
    .innerJoin('catalogs', 'catalogs.id', 'resources.catalog_id')
    .where('resource_versions.resource_id', '=', resourceId)
    .where(versionVisibleTo(principal));
}

/** One visible version, with its Resource's gate, so that a version answers in one query when it can. */
export async function findVersion(
  db: Db,
  principal: Principal,
  resourceId: string,
  versionId: string,
): Promise<{ version: ResourceVersionRow; gate: ResourceGate } | undefined> {
  const row = await visibleVersionsOf(db, principal, resourceId)
    .selectAll('resource_versions')
    .select(['resources.facets as resource_facets', 'catalogs.account_id as catalog_account_id'])
    .where('resource_versions.id', '=', versionId)
    .executeTakeFirst();
  if (!row) return undefined;
  const { resource_facets, catalog_account_id, ...version } = row;
  return { version, gate: { id: resourceId, facets: resource_facets, catalogAccountId: catalog_account_id } };
}

export async function countVersions(db: Db, principal: Principal, resourceId: string): Promise<number> {
  const row = await visibleVersionsOf(db, principal, resourceId)
    .select((eb) => eb.fn.countAll().as('total'))
    .executeTakeFirstOrThrow();
  return Number(row.total);
}

/** A Resource's versions, newest first (D16). */
export async function listVersions(
  db: Db,
  principal: Principal,
  resourceId: string,
  window: PageWindow,
): Promise<ResourceVersionRow[]> {
  return visibleVersionsOf(db, principal, resourceId)
    .selectAll('resource_versions')
    .orderBy('resource_versions.created_at', 'desc')
    .orderBy('resource_versions.id', 'desc')
    .offset(window.offset)
    .limit(window.limit)
    .execute();
}
