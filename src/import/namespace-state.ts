import type { CatalogRow, Db, ResourceRow, ResourceVersionRow } from '../db/tables.js';
import { chunk, MAX_IN_LIST } from './batches.js';

/** Whose Catalogs an import writes: the service's own, or one account's. */
export type ImportOwner = { readonly kind: 'svc' } | { readonly kind: 'account'; readonly accountId: string };

/** What the import needs to know of a Catalog's current version. */
export interface CurrentCatalogVersion {
  readonly id: string;
  readonly version: string;
  readonly manifestHash: string;
  readonly pins: string;
}

export interface ResourceState {
  readonly row: ResourceRow;
  readonly currentVersion?: ResourceVersionRow;
  /** Every version label the Resource has used, current one included. */
  readonly labels: ReadonlySet<string>;
}

export interface CatalogState {
  readonly row: CatalogRow;
  readonly currentVersion?: CurrentCatalogVersion;
  readonly labels: ReadonlySet<string>;
  readonly resources: ReadonlyMap<string, ResourceState>;
}

/** The stored side of an import: the owner's Catalogs named in the tree, by slug, with everything below. */
export interface NamespaceState {
  readonly accountExists: boolean;
  readonly catalogs: ReadonlyMap<string, CatalogState>;
}

/**
 * Loads, in a fixed handful of queries whatever the tree's size, what the planner compares the tree
 * with: the Catalogs of `owner` whose slugs are in `catalogSlugs`, their current and past version
 * labels, their Resources, the Resources' current versions and past labels.
 *
 * @example
 * const state = await loadNamespaceState(db, { kind: 'svc' }, ['handbook']);
 * state.catalogs.get('handbook')?.resources.size;
 */
export async function loadNamespaceState(
  db: Db,
  owner: ImportOwner,
  catalogSlugs: readonly string[],
): Promise<NamespaceState> {
  const accountId = owner.kind === 'account' ? owner.accountId : null;
  const accountExists =
    accountId === null ||
    (await db.selectFrom('accounts').select('id').where('id', '=', accountId).executeTakeFirst()) !==
      undefined;

  const catalogRows = await inLists(catalogSlugs, (slugs) =>
    db
      .selectFrom('catalogs')
      .selectAll()
      .where('account_id', accountId === null ? 'is' : '=', accountId)
      .where('slug', 'in', slugs)
      .execute(),
  );
  const catalogIds = catalogRows.map((row) => row.id);
  const currentCatalogVersionIds = catalogRows.flatMap((row) => row.current_version_id ?? []);

  const [catalogLabels, currentCatalogVersions, resourceRows, currentVersions, resourceLabels] =
    await Promise.all([
      inLists(catalogIds, (ids) =>
        db
          .selectFrom('catalog_versions')
          .select(['catalog_id', 'version'])
          .where('catalog_id', 'in', ids)
          .execute(),
      ),
      inLists(currentCatalogVersionIds, (ids) =>
        db
          .selectFrom('catalog_versions')
          .select(['id', 'version', 'manifest_hash', 'pins'])
          .where('id', 'in', ids)
          .execute(),
      ),
      inLists(catalogIds, (ids) =>
        db.selectFrom('resources').selectAll().where('catalog_id', 'in', ids).execute(),
      ),
      inLists(catalogIds, (ids) =>
        db
          .selectFrom('resource_versions as v')
          .innerJoin('resources as r', 'r.current_version_id', 'v.id')
          .selectAll('v')
          .where('r.catalog_id', 'in', ids)
          .execute(),
      ),
      inLists(catalogIds, (ids) =>
        db
          .selectFrom('resource_versions as v')
          .innerJoin('resources as r', 'r.id', 'v.resource_id')
          .select(['v.resource_id', 'v.version'])
          .where('r.catalog_id', 'in', ids)
          .execute(),
      ),
    ]);

  const catalogLabelsById = groupLabels(catalogLabels.map((row) => [row.catalog_id, row.version]));
  const catalogVersionsById = new Map(currentCatalogVersions.map((row) => [row.id, row]));
  const resourceLabelsById = groupLabels(resourceLabels.map((row) => [row.resource_id, row.version]));
  const versionsById = new Map(currentVersions.map((row) => [row.id, row]));

  const resourcesByCatalog = new Map<string, Map<string, ResourceState>>();
  for (const row of resourceRows) {
    const bySlug = resourcesByCatalog.get(row.catalog_id) ?? new Map<string, ResourceState>();
    resourcesByCatalog.set(row.catalog_id, bySlug);
    const currentVersion =
      row.current_version_id === null ? undefined : versionsById.get(row.current_version_id);
    bySlug.set(row.slug, {
      row,
      ...(currentVersion ? { currentVersion } : {}),
      labels: resourceLabelsById.get(row.id) ?? new Set(),
    });
  }

  const catalogs = new Map<string, CatalogState>();
  for (const row of catalogRows) {
    const version =
      row.current_version_id === null ? undefined : catalogVersionsById.get(row.current_version_id);
    catalogs.set(row.slug, {
      row,
      ...(version
        ? {
            currentVersion: {
              id: version.id,
              version: version.version,
              manifestHash: version.manifest_hash,
              pins: version.pins,
            },
          }
        : {}),
      labels: catalogLabelsById.get(row.id) ?? new Set(),
      resources: resourcesByCatalog.get(row.id) ?? new Map(),
    });
  }
  return { accountExists, catalogs };
}

/** Runs `query` over slices of `values` small enough for one `in (…)` list, and joins the results. */
async function inLists<V, R>(values: readonly V[], query: (slice: V[]) => Promise<R[]>): Promise<R[]> {
  const results: R[] = [];
  for (const slice of chunk(values, MAX_IN_LIST)) results.push(...(await query(slice)));
  return results;
}

function groupLabels(pairs: [string, string][]): Map<string, Set<string>> {
  const groups = new Map<string, Set<string>>();
  for (const [id, label] of pairs) {
    const labels = groups.get(id) ?? new Set<string>();
    groups.set(id, labels);
    labels.add(label);
  }
  return groups;
}
