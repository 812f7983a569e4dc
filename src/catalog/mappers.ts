import type { ResourceVersionRow } from '../db/tables.js';
import type { Facets, LifecycleStatus, Manifest, Owner, SourceScope } from '../schemas/common.js';
import type {
  ResourceDetail,
  ResourceKind,
  ResourceListItem,
  ResourcePin,
  ResourceVersionDetail,
  ResourceVersionSummary,
  StorageBackend,
  VersionStatus,
} from '../schemas/playbook.js';
import type { CatalogWithVersionRow, ResourceDetailRow, ResourceListRow } from './read-repository.js';
import type { CatalogHead, CatalogVersionObject } from './serializers.js';

/**
 * Rows to API objects, in one place. Optional fields are left out rather than sent as null, and
 * nothing that is not in the contract (account ids, storage keys) is copied across.
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

export function catalogHumanRef(accountId: string | null, slug: string): string {
  return `${ownership(accountId).owner}/${slug}`;
}

export function toCatalogHead(row: CatalogWithVersionRow): CatalogHead {
  const { sourceScope, owner } = ownership(row.account_id);
  return {
    id: row.id,
    sourceScope,
    owner,
    slug: row.slug,
    humanRef: `${owner}/${row.slug}`,
    name: row.name,
    status: row.status as LifecycleStatus,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
    ...optional({
      archivedAt: row.archived_at,
      description: row.description,
      facets: parseFacets(row.facets) ?? null,
    }),
  };
}

/** The columns of a catalog version that `listCatalogs` reads beside its Catalog (all but the pins). */
export interface CatalogVersionColumns {
  readonly id: string;
  readonly version: string;
  readonly manifest_hash: string;
  readonly resource_count: number;
  readonly published_at: string | null;
}

/** The current version's columns of a Catalog row, or none when it has no current version. */
export function catalogVersionColumnsOf(row: CatalogWithVersionRow): CatalogVersionColumns | undefined {
  if (row.cv_id === null) return undefined;
  return {
    id: row.cv_id,
    version: row.cv_version!,
    manifest_hash: row.cv_manifest_hash!,
    resource_count: row.cv_resource_count!,
    published_at: row.cv_published_at,
  };
}

export function toCatalogVersion(columns: CatalogVersionColumns, pins: string): CatalogVersionObject {
  return {
    id: columns.id,
    version: columns.version,
    resourcePins: JSON.parse(pins) as ResourcePin[],
    manifestHash: columns.manifest_hash,
    resourceCount: Number(columns.resource_count),
    ...optional({ publishedAt: columns.published_at }),
  };
}

type VersionSummaryColumns = {
  v_id: string;
  v_version: string;
  v_content_hash: string;
  v_content_size_bytes: number;
  v_media_type: string;
  v_storage_backend: string;
  v_status: string;
  v_published_at: string | null;
  v_superseded_at: string | null;
  v_archived_at: string | null;
};

function joinedVersionSummary(row: VersionSummaryColumns): ResourceVersionSummary {
  return {
    id: row.v_id,
    version: row.v_version,
    contentHash: row.v_content_hash,
    contentSizeBytes: Number(row.v_content_size_bytes),
    mediaType: row.v_media_type,
    storageBackend: row.v_storage_backend as StorageBackend,
    status: row.v_status as VersionStatus,
    ...optional({
      publishedAt: row.v_published_at,
      supersededAt: row.v_superseded_at,
      archivedAt: row.v_archived_at,
    }),
  };
}

function resourceFields(row: ResourceListRow | ResourceDetailRow) {
  const { sourceScope, owner } = ownership(row.catalog_account_id);
  return {
    id: row.id,
    catalogId: row.catalog_id,
    catalogHumanRef: `${owner}/${row.catalog_slug}`,
    sourceScope,
    slug: row.slug,
    humanRef: `${owner}/${row.catalog_slug}/${row.slug}`,
    kind: row.kind as ResourceKind,
    title: row.title,
    status: row.status as LifecycleStatus,
    manifest: JSON.parse(row.manifest) as Manifest,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
    ...optional({
      archivedAt: row.archived_at,
      description: row.description,
      facets: parseFacets(row.facets) ?? null,
    }),
  };
}

export function toResourceListItem(row: ResourceListRow): ResourceListItem {
  const item: ResourceListItem = resourceFields(row);
  if (row.v_id !== null) item.currentVersion = joinedVersionSummary(row as VersionSummaryColumns);
  return item;
}

export function toResourceDetail(row: ResourceDetailRow, content: string): ResourceDetail {
  return {
    ...resourceFields(row),
    currentVersion: {
      ...joinedVersionSummary(row),
      manifest: JSON.parse(row.v_manifest) as Manifest,
      content,
    },
  };
}

export function toVersionSummary(row: ResourceVersionRow): ResourceVersionSummary {
  return {
    id: row.id,
    version: row.version,
    contentHash: row.content_hash,
    contentSizeBytes: Number(row.content_size_bytes),
    mediaType: row.media_type,
    storageBackend: row.storage_backend as StorageBackend,
    status: row.status as VersionStatus,
    ...optional({
      publishedAt: row.published_at,
      supersededAt: row.superseded_at,
      archivedAt: row.archived_at,
    }),
  };
}

export function toVersionDetail(row: ResourceVersionRow, content: string): ResourceVersionDetail {
  return { ...toVersionSummary(row), manifest: JSON.parse(row.manifest) as Manifest, content };
}
