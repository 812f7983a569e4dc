import { sql } from 'kysely';
import type { Principal } from '../auth/principal.js';
import type { Stretch } from '../changes/entity-changes.js';
import type { Db } from '../db/tables.js';
import {
  CATALOG_COLUMNS,
  CATALOG_VERSION_COLUMNS,
  type CatalogListRow,
  type CurrentCatalogVersionRow,
  pick,
  prefixed,
  RESOURCE_COLUMNS,
  type ResourceListRow,
  unprefixed,
  VERSION_SUMMARY_COLUMNS,
  type VersionSummaryRow,
  type VisibleCatalog,
} from './read-repository.js';
import {
  catalogAdmitted,
  catalogVisibleTo,
  currentVersionVisible,
  currentVersionVisibleIn,
  ownerOf,
  resourceVisibleIn,
  resourceVisibleTo,
} from './visibility.js';

/**
 * The queries of the sync feed (D27): what a caller sees, walked in a stable order by key rather than
 * by page number (an initial sync of 100,000 Resources is a thousand pages, each a seek), and read
 * again by id once the change log has said what changed. Every one filters through `visibility.ts`.
 */

/** Where a Catalog stands in the order of the Catalogs list (D3): the service's first, then the account's, by slug. */
export interface CatalogPlace {
  /** An account's Catalog (after every service Catalog). */
  readonly owned: boolean;
  readonly slug: string;
}

/** A visible Catalog, its place, and how many pins its current version holds. */
export interface CatalogHead extends VisibleCatalog {
  readonly pins: number;
}

export function placeOf(catalog: {
  readonly account_id: string | null;
  readonly slug: string;
}): CatalogPlace {
  return { owned: catalog.account_id !== null, slug: catalog.slug };
}

/**
 * At most `limit` Catalogs visible to `principal` after `after` (from the first without it), in the
 * order of the Catalogs list: each stretch read from its own unique index, in order.
 */
export async function visibleCatalogsAfter(
  db: Db,
  principal: Principal,
  after: CatalogPlace | undefined,
  limit: number,
): Promise<CatalogHead[]> {
  const heads = (owned: boolean, afterSlug: string | undefined, count: number) =>
    db
      .selectFrom('catalogs')
      .leftJoin('catalog_versions as cv', 'cv.id', 'catalogs.current_version_id')
      .select(['catalogs.id', 'catalogs.account_id', 'catalogs.slug', 'cv.resource_count'])
      .where(catalogVisibleTo(principal))
      .where('catalogs.account_id', owned ? '=' : 'is', owned ? principal.accountId : null)
      .$if(afterSlug !== undefined, (query) => query.where('catalogs.slug', '>', afterSlug!))
      .orderBy('catalogs.slug')
      .limit(count)
      .execute();
  const rows = [];
  if (after === undefined || !after.owned) rows.push(...(await heads(false, after?.slug, limit)));
  if (rows.length < limit && principal.accountId !== null) {
    rows.push(...(await heads(true, after?.owned ? after.slug : undefined, limit - rows.length)));
  }
  return rows.map((row) => ({
    id: row.id,
    account_id: row.account_id,
    slug: row.slug,
    pins: Number(row.resource_count ?? 0),
  }));
}

/** The Catalog at `place`, if `principal` sees it. */
export async function visibleCatalogAt(
  db: Db,
  principal: Principal,
  place: CatalogPlace,
): Promise<VisibleCatalog | undefined> {
  if (place.owned && principal.accountId === null) return undefined;
  return db
    .selectFrom('catalogs')
    .select(['catalogs.id', 'catalogs.account_id', 'catalogs.slug'])
    .where(catalogVisibleTo(principal))
    .where('catalogs.account_id', place.owned ? '=' : 'is', place.owned ? principal.accountId : null)
    .where('catalogs.slug', '=', place.slug)
    .executeTakeFirst();
}

/** The Catalogs of `ids` that `principal` sees, each with its current version (its pins are stored apart); order not kept. */
export async function visibleCatalogs(
  db: Db,
  principal: Principal,
  ids: readonly string[],
): Promise<CatalogListRow[]> {
  if (ids.length === 0) return [];
  const rows = await db
    .selectFrom('catalogs')
    .leftJoin('catalog_versions as cv', 'cv.id', 'catalogs.current_version_id')
    .selectAll('catalogs')
    .select(prefixed('cv', CATALOG_VERSION_COLUMNS))
    .where(catalogVisibleTo(principal))
    .where('catalogs.id', 'in', [...ids])
    .execute();
  return rows.map((row) => ({
    catalog: pick(row, CATALOG_COLUMNS),
    currentVersion:
      row.cv_id === null
        ? undefined
        : unprefixed<CurrentCatalogVersionRow>(row, 'cv', CATALOG_VERSION_COLUMNS),
  }));
}

/**
 * At most `limit` Resources of a visible Catalog after the slug `afterSlug`, by slug, each with its
 * current version when that is visible; with `unchangedIn`, only those with no change in that
 * stretch of the log (the others are sent at their own change).
 */
export async function visibleResourcesAfter(
  db: Db,
  catalog: VisibleCatalog,
  afterSlug: string,
  limit: number,
  unchangedIn?: Stretch,
): Promise<ResourceListRow[]> {
  const rows = await db
    .selectFrom('resources')
    .leftJoin('resource_versions as v', (on) =>
      on.onRef('v.id', '=', 'resources.current_version_id').on(currentVersionVisibleIn(ownerOf(catalog))),
    )
    .selectAll('resources')
    .select(prefixed('v', VERSION_SUMMARY_COLUMNS))
    .where('resources.catalog_id', '=', catalog.id)
    .where(resourceVisibleIn(ownerOf(catalog)))
    .where('resources.slug', '>', afterSlug)
    .$if(unchangedIn !== undefined, (query) =>
      query.where(({ not, exists, selectFrom }) =>
        not(
          exists(
            selectFrom('changes')
              .select(sql`1`.as('one'))
              .whereRef('changes.target_id', '=', 'resources.id')
              .where('changes.seq', '>', unchangedIn!.from)
              .where('changes.seq', '<=', unchangedIn!.upto),
          ),
        ),
      ),
    )
    .orderBy('resources.slug')
    .limit(limit)
    .execute();
  return rows.map((row) => ({
    resource: pick(row, RESOURCE_COLUMNS),
    catalogAccountId: catalog.account_id,
    catalogSlug: catalog.slug,
    currentVersion:
      row.v_id === null ? undefined : unprefixed<VersionSummaryRow>(row, 'v', VERSION_SUMMARY_COLUMNS),
  }));
}

/** The Resources of `ids` that `principal` sees, as list items; order not kept. */
export async function visibleResources(
  db: Db,
  principal: Principal,
  ids: readonly string[],
): Promise<ResourceListRow[]> {
  if (ids.length === 0) return [];
  const rows = await db
    .selectFrom('resources')
    .innerJoin('catalogs', 'catalogs.id', 'resources.catalog_id')
    .leftJoin('resource_versions as v', (on) =>
      on.onRef('v.id', '=', 'resources.current_version_id').on(currentVersionVisible),
    )
    .selectAll('resources')
    .select(['catalogs.account_id as catalog_account_id', 'catalogs.slug as catalog_slug'])
    .select(prefixed('v', VERSION_SUMMARY_COLUMNS))
    .where('resources.id', 'in', [...ids])
    .where(resourceVisibleTo(principal))
    .execute();
  return rows.map((row) => ({
    resource: pick(row, RESOURCE_COLUMNS),
    catalogAccountId: row.catalog_account_id,
    catalogSlug: row.catalog_slug,
    currentVersion:
      row.v_id === null ? undefined : unprefixed<VersionSummaryRow>(row, 'v', VERSION_SUMMARY_COLUMNS),
  }));
}

/**
 * Of the Resources of `ids`, those whose Catalog `principal` sees (whether or not the Resource itself
 * is visible): a Resource hidden with its Catalog goes with the Catalog's removal, and needs none of
 * its own.
 */
export async function inVisibleCatalogs(
  db: Db,
  principal: Principal,
  ids: readonly string[],
): Promise<Set<string>> {
  if (ids.length === 0) return new Set();
  const rows = await db
    .selectFrom('resources')
    .innerJoin('catalogs', 'catalogs.id', 'resources.catalog_id')
    .select('resources.id')
    .where(catalogVisibleTo(principal))
    .where('resources.id', 'in', [...ids])
    .execute();
  return new Set(rows.map((row) => row.id));
}

/**
 * D32: of the Catalogs of `ids`, those `principal`'s key admits whatever their state (every one for a
 * key not restricted to some Catalogs): a Catalog outside them was never in the key's view, so
 * nothing of it is told, not even that it left.
 */
export async function admittedCatalogs(
  db: Db,
  principal: Principal,
  ids: readonly string[],
): Promise<ReadonlySet<string>> {
  if (ids.length === 0 || !principal.restrictions?.catalogs) return new Set(ids);
  const rows = await db
    .selectFrom('catalogs')
    .select(['catalogs.id', 'catalogs.account_id', 'catalogs.slug'])
    .where('catalogs.id', 'in', [...ids])
    .execute();
  return new Set(
    rows.filter((row) => catalogAdmitted(principal, row.account_id, row.slug)).map((row) => row.id),
  );
}
