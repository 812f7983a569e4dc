import { toCatalog } from '../catalog/mappers.js';
import type { CatalogListRow } from '../catalog/read-repository.js';
import { readPinsTexts } from '../catalog/stored-pins.js';
import type { Db } from '../db/tables.js';
import type { SyncCatalogItem, SyncItem } from '../schemas/sync.js';

/**
 * An item of a page. A Catalog's pins are kept as the JSON text they are stored as, in its stored
 * parts (`pinsParts`, its `resourcePins` left empty): a Catalog of 100,000 Resources pins 20 MB of
 * them, which would otherwise be parsed into objects only to be written out again as the same text,
 * and which joined would be held twice (D30).
 */
export type FeedItem =
  | (SyncCatalogItem & { readonly pinsParts?: readonly string[] })
  | Exclude<SyncItem, SyncCatalogItem>;

/** The stored text of the pins of the current versions of `rows`, by version id. */
export function catalogsPins(
  db: Db,
  rows: Iterable<CatalogListRow>,
): Promise<Map<string, readonly string[]>> {
  return readPinsTexts(
    db,
    [...rows].flatMap((row) => row.currentVersion?.id ?? []),
  );
}

/** A Catalog as an item, its pins left as the text they are stored as (`pinsTexts`, by version id). */
export function catalogItem(
  row: CatalogListRow,
  pinsTexts: ReadonlyMap<string, readonly string[]>,
): FeedItem {
  const version = row.currentVersion;
  if (!version) return { type: 'catalog', catalog: toCatalog(row.catalog, undefined) };
  const pinsParts = pinsTexts.get(version.id);
  if (pinsParts === undefined) throw new Error(`no stored pins for catalog version ${version.id}`);
  return { type: 'catalog', catalog: toCatalog(row.catalog, version), pinsParts };
}
