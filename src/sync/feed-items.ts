import { toCatalog } from '../catalog/mappers.js';
import type { CatalogListRow } from '../catalog/read-repository.js';
import { type PinsReading, storedPinsText } from '../catalog/stored-pins.js';
import type { Db } from '../db/tables.js';
import type { SyncCatalogItem, SyncItem } from '../schemas/sync.js';

/**
 * A Catalog's pins as a page names them: its current version, whose pins are read from storage as
 * the page is written, in the JSON text they are stored as (a Catalog of 100,000 Resources pins 20 MB
 * of it, never parsed nor held whole, D30), and how many there are.
 */
export interface PinsRef {
  readonly versionId: string;
  readonly count: number;
}

/** An item of a page; a Catalog's `resourcePins` are left empty, for its `pins` to be written there. */
export type FeedItem = (SyncCatalogItem & { readonly pins?: PinsRef }) | Exclude<SyncItem, SyncCatalogItem>;

/** Reads a version's stored pins as text, in parts, as `reading` says (stored-pins.ts). */
export type PinsSource = (versionId: string, reading: PinsReading) => AsyncGenerator<string>;

/** Where a feed's pages read their Catalogs' pins. */
export function pinsSource(db: Db): PinsSource {
  return (versionId, reading) => storedPinsText(db, versionId, undefined, reading);
}

/** A Catalog as an item, its pins named by its current version, to be read as the page is written. */
export function catalogItem(row: CatalogListRow): FeedItem {
  const version = row.currentVersion;
  if (!version) return { type: 'catalog', catalog: toCatalog(row.catalog, undefined) };
  return {
    type: 'catalog',
    catalog: toCatalog(row.catalog, version),
    pins: { versionId: version.id, count: Number(version.resource_count) },
  };
}
