import { type CatalogTagger, readCatalogTagger } from '../catalog/object-tags.js';
import { readStoredPins } from '../catalog/stored-pins.js';
import { SERVICE_NAMESPACE } from '../changes/change-log.js';
import { chunk, MAX_IN_LIST } from '../db/batches.js';
import type { CatalogRow, Db, ResourceRow, ResourceVersionRow } from '../db/tables.js';
import { yieldIfBusy } from '../foundation/pace.js';
import type { ResourcePin } from '../schemas/playbook.js';

/** Whose Catalogs an import writes: the service's own, or one account's. */
export type ImportOwner = { readonly kind: 'svc' } | { readonly kind: 'account'; readonly accountId: string };

/** What the import needs to know of a Catalog's current version. */
export interface CurrentCatalogVersion {
  readonly id: string;
  readonly version: string;
  readonly manifestHash: string;
  /**
   * Its pins, read (a slice at a time) when asked for: tens of megabytes for a large Catalog, needed
   * only to say which pins changed under an unchanged label. Read through the same connection (or
   * transaction) as the rest of the state, while it is open.
   */
  pins(): Promise<ResourcePin[]>;
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
  /** The version tag of each of its Catalogs as this state holds them (object-tags.ts), read after them. */
  readonly catalogTag: CatalogTagger;
}

/**
 * Loads, in a handful of queries per thousand Resources, what the planner compares the tree with:
 * the Catalogs of `owner` whose slugs are in `catalogSlugs`, their current and past version labels,
 * their Resources, the Resources' current versions and past labels.
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

  const [catalogLabels, currentCatalogVersions] = await Promise.all([
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
        .select(['id', 'version', 'manifest_hash'])
        .where('id', 'in', ids)
        .execute(),
    ),
  ]);
  const catalogLabelsById = groupLabels(catalogLabels.map((row) => [row.catalog_id, row.version]));
  const catalogVersionsById = new Map(currentCatalogVersions.map((row) => [row.id, row]));

  const resourcesByCatalog = new Map<string, Map<string, ResourceState>>();
  for (const catalogId of catalogIds) resourcesByCatalog.set(catalogId, await resourceStates(db, catalogId));
  const catalogTag = await readCatalogTagger(db, accountId ?? SERVICE_NAMESPACE);
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
              pins: () => readStoredPins(db, version.id),
            },
          }
        : {}),
      labels: catalogLabelsById.get(row.id) ?? new Set(),
      resources: resourcesByCatalog.get(row.id) ?? new Map(),
    });
  }
  return { accountExists, catalogs, catalogTag };
}

/**
 * Resources read per page: a statement holds the event loop on SQLite, whose driver is synchronous,
 * and a page of 500 Resources' current versions is tens of milliseconds just after a large commit.
 */
const STATE_PAGE = 500;

/**
 * A Catalog's Resources, with their current versions and every label they used, by slug. Read a
 * page at a time along the (catalog, slug) key, turning the event loop between pages (D20): on SQLite
 * one statement of 100,000 rows would hold every other request for its whole length.
 */
async function resourceStates(db: Db, catalogId: string): Promise<Map<string, ResourceState>> {
  const bySlug = new Map<string, ResourceState>();
  let after: string | undefined;
  for (;;) {
    // SQLite's statements resolve without a turn of the event loop: the turn is given here.
    await yieldIfBusy();
    const rows = await db
      .selectFrom('resources')
      .selectAll()
      .where('catalog_id', '=', catalogId)
      .$if(after !== undefined, (query) => query.where('slug', '>', after as string))
      .orderBy('slug')
      .limit(STATE_PAGE)
      .execute();
    if (rows.length === 0) return bySlug;
    const currentIds = rows.flatMap((row) => row.current_version_id ?? []);
    const [currentVersions, labels] = await Promise.all([
      currentIds.length === 0
        ? []
        : db.selectFrom('resource_versions').selectAll().where('id', 'in', currentIds).execute(),
      db
        .selectFrom('resource_versions')
        .select(['resource_id', 'version'])
        .where(
          'resource_id',
          'in',
          rows.map((row) => row.id),
        )
        .execute(),
    ]);
    const versionsById = new Map(currentVersions.map((row) => [row.id, row]));
    const labelsById = groupLabels(labels.map((row) => [row.resource_id, row.version]));
    for (const row of rows) {
      const currentVersion =
        row.current_version_id === null ? undefined : versionsById.get(row.current_version_id);
      bySlug.set(row.slug, {
        row,
        ...(currentVersion ? { currentVersion } : {}),
        labels: labelsById.get(row.id) ?? new Set(),
      });
    }
    if (rows.length < STATE_PAGE) return bySlug;
    after = rows[rows.length - 1]!.slug;
  }
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
