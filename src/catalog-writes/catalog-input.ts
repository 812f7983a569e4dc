import { canonicalJson, sha256Hex } from '../content/hash.js';
import type { Facets, LifecycleStatus } from '../schemas/common.js';
import type { ResourceKind, StorageBackend } from '../schemas/playbook.js';

/**
 * What a write of Catalogs takes (D15, D23): Catalogs and their Resources as values, whichever door
 * they came through. `playbook import` reads a folder tree into them (import/read-tree.ts), and the
 * publishing routes map request bodies into them (publish/); the planner knows neither files nor
 * bodies, only the `origin` each door gives, to name what it refuses.
 */

/** Content up to this many UTF-8 bytes defaults to `database-text`; anything larger to `object-storage` (D15). */
export const DATABASE_TEXT_MAX_BYTES = 65_536;

/** Where content of `sizeBytes` is stored when its file or body does not say (D15). */
export function defaultStorageBackend(sizeBytes: number): StorageBackend {
  return sizeBytes <= DATABASE_TEXT_MAX_BYTES ? 'database-text' : 'object-storage';
}

/** What a Resource gives that is too large to hold for every Resource of a large write at once. */
export interface ResourceBody {
  /** The manifest as JSON text, as it is stored. */
  readonly manifest: string;
  readonly content: string;
}

/**
 * Where a Resource's manifest and content are read when they are written: a large write holds only
 * their digests (100,000 resources would otherwise hold hundreds of megabytes), and the writer reads
 * each again, a batch at a time (from a file of an import tree, or from a request body held in memory).
 * A source that reads again checks the digests, so what is written is what was planned.
 */
export interface ResourceSource {
  read(): Promise<ResourceBody>;
}

/** A Resource to write: its fields, and the digests and sizes of its manifest and content. */
export interface ResourceInput {
  readonly slug: string;
  /** Where it came from, as its door names it: a file of the tree, or `resources[3]` of a request body. */
  readonly origin: string;
  readonly kind: ResourceKind;
  readonly title: string;
  readonly version: string;
  readonly mediaType: string;
  readonly status: LifecycleStatus;
  readonly description: string | undefined;
  /** The facets as the JSON text that is stored (a tree of 100,000 holds them as text, not objects). */
  readonly facetsJson: string | undefined;
  /** SHA-256 of the manifest's canonical JSON: a change of manifest is told by it. */
  readonly manifestDigest: string;
  readonly storageBackend: StorageBackend;
  readonly contentHash: string;
  readonly contentSizeBytes: number;
  readonly source: ResourceSource;
}

/** A Catalog to write, and its Resources in slug order. */
export interface CatalogInput {
  readonly slug: string;
  /** Where it came from, as its door names it: its `catalog.json`, or '' for a request body. */
  readonly origin: string;
  readonly name: string;
  readonly version: string;
  readonly status: LifecycleStatus;
  readonly description?: string;
  readonly facets?: Facets;
  readonly resources: readonly ResourceInput[];
  /**
   * D23's one-Resource write: only the Resources given are planned; the others, the Catalog's own
   * fields and its pins are left as they are (no Catalog version is published).
   */
  readonly resourcesOnly?: boolean;
}

/** The Catalogs of one write, all of one owner. */
export interface CatalogInputs {
  readonly catalogs: readonly CatalogInput[];
  /** Resources read, for the report (an import's files, a body's items). */
  readonly resourceFileCount: number;
}

/** The digest of a manifest's canonical JSON, from its JSON text: equal manifests, equal digests. */
export function manifestDigestOf(manifestJson: string): string {
  return sha256Hex(canonicalJson(JSON.parse(manifestJson)));
}
