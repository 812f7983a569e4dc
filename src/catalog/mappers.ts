import type { CatalogRow } from '../db/tables.js';
import type { Facets, Manifest, Owner, SourceScope } from '../schemas/common.js';
import type {
  Catalog,
  ResourceDetail,
  ResourceListItem,
  ResourcePin,
  ResourceVersionDetail,
  ResourceVersionSummary,
} from '../schemas/playbook.js';
import type {
  CurrentCatalogVersionRow,
  ResourceDetailRow,
  ResourceListRow,
  VersionDetailRow,
  VersionSummaryRow,
} from './read-repository.js';

/**
 * Rows to API objects, one mapper per shape of the contract. Optional fields are left out rather than
 * sent as null, and nothing that is not in the contract (account ids, storage keys) is copied across.
 */

type Optional<T> = { [K in keyof T]?: T[K] };

function optional<T extends Record<string, unknown>>(fields: { [K in keyof T]: T[K] | null }): Optional<T> {
  const out: Optional<T> = {};
  for (const key of Object.keys(fields) as (keyof T)[]) {
    const value = fields[key];
    if (value !== null && value !== undefined) out[key] = value;
  }
  return out;
}

export function parseFacets(json: string | null): Facets | undefined {
  return json === null ? undefined : (JSON.parse(json) as Facets);
}

function ownership(accountId: string | null): { sourceScope: SourceScope; owner: Owner } {
  return accountId === null ? { sourceScope: 'svc', owner: 'svc' } : { sourceScope: 'account', owner: 'org' };
}

/**
 * A Catalog, with its current version and that version's pins: none unless given, as an answer written
 * from the stored pins as they are read has them (stored-pins.ts).
 */
export function toCatalog(
  row: CatalogRow,
  version: CurrentCatalogVersionRow | undefined,
  pins: ResourcePin[] = [],
): Catalog {
  const { sourceScope, owner } = ownership(row.account_id);
  return {
    id: row.id,
    sourceScope,
    owner,
    slug: row.slug,
    humanRef: `${owner}/${row.slug}`,
    name: row.name,
    status: row.status,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
    ...optional({
      archivedAt: row.archived_at,
      description: row.description,
      facets: parseFacets(row.facets) ?? null,
    }),
    ...(version
      ? {
          currentVersion: {
            id: version.id,
            version: version.version,
            resourcePins: pins,
            manifestHash: version.manifest_hash,
            resourceCount: Number(version.resource_count),
            ...optional({ publishedAt: version.published_at }),
          },
        }
      : {}),
  };
}

/** A Resource Version without manifest or content: list items, and the version history. */
export function toVersionSummary(row: VersionSummaryRow): ResourceVersionSummary {
  return {
    id: row.id,
    version: row.version,
    contentHash: row.content_hash,
    contentSizeBytes: Number(row.content_size_bytes),
    mediaType: row.media_type,
    storageBackend: row.storage_backend,
    status: row.status,
    ...optional({
      publishedAt: row.published_at,
      supersededAt: row.superseded_at,
      archivedAt: row.archived_at,
    }),
  };
}

/** A Resource Version with its manifest and content: the version detail, and a Resource's current one. */
export function toVersionDetail(row: VersionDetailRow, content: string): ResourceVersionDetail {
  return { ...toVersionSummary(row), manifest: JSON.parse(row.manifest) as Manifest, content };
}

function resourceFields({ resource, catalogAccountId, catalogSlug }: ResourceListRow) {
  const { sourceScope, owner } = ownership(catalogAccountId);
  return {
    id: resource.id,
    catalogId: resource.catalog_id,
    catalogHumanRef: `${owner}/${catalogSlug}`,
    sourceScope,
    slug: resource.slug,
    humanRef: `${owner}/${catalogSlug}/${resource.slug}`,
    kind: resource.kind,
    title: resource.title,
    status: resource.status,
    manifest: JSON.parse(resource.manifest) as Manifest,
    createdAt: resource.created_at,
    updatedAt: resource.updated_at,
    ...optional({
      archivedAt: resource.archived_at,
      description: resource.description,
      facets: parseFacets(resource.facets) ?? null,
    }),
  };
}

export function toResourceListItem(row: ResourceListRow): ResourceListItem {
  const item: ResourceListItem = resourceFields(row);
  if (row.currentVersion) item.currentVersion = toVersionSummary(row.currentVersion);
  return item;
}

export function toResourceDetail(row: ResourceDetailRow, content: string): ResourceDetail {
  return { ...resourceFields(row), currentVersion: toVersionDetail(row.currentVersion, content) };
}
