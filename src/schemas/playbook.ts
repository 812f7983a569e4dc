import { type Static, Type } from '@sinclair/typebox';
import {
  Counter,
  DateTime,
  Description,
  Facets,
  FacetValue,
  Hash,
  LifecycleStatus,
  Manifest,
  Name,
  Owner,
  PageQuery,
  Slug,
  SOURCE_SCOPES,
  SourceScope,
  StringEnum,
  Uuid,
  VersionLabel,
} from './common.js';

export const RESOURCE_KINDS = [
  'document',
  'topic',
  'reference',
  'team-member',
  'workflow',
  'lifecycle',
  'integration',
  'policy',
] as const;
export const ResourceKind = StringEnum(RESOURCE_KINDS);
export type ResourceKind = Static<typeof ResourceKind>;

export const VERSION_STATUSES = ['draft', 'published', 'superseded', 'archived'] as const;
export const VersionStatus = StringEnum(VERSION_STATUSES);
export type VersionStatus = Static<typeof VersionStatus>;

export const STORAGE_BACKENDS = ['object-storage', 'database-text'] as const;
export const StorageBackend = StringEnum(STORAGE_BACKENDS, {
  description: 'where content is stored; the storage location itself is never exposed',
});
export type StorageBackend = Static<typeof StorageBackend>;

const HUMAN_REF = '^(svc|org)/[a-z0-9]+(?:-[a-z0-9]+)*$';
const RESOURCE_HUMAN_REF = '^(svc|org)/[a-z0-9]+(?:-[a-z0-9]+)*/[a-z0-9]+(?:-[a-z0-9]+)*$';
const CatalogHumanRef = Type.String({ minLength: 3, maxLength: 180, pattern: HUMAN_REF });
const ResourceHumanRef = Type.String({ minLength: 5, maxLength: 260, pattern: RESOURCE_HUMAN_REF });

/** Resources one Catalog may hold, so its version's pins are bounded too (D20). */
export const MAX_CATALOG_RESOURCES = 100_000;
/** The ceiling of `PLAYBOOK_MAX_CONTENT_BYTES` (D20): no content is ever longer. */
export const MAX_CONTENT_BYTES_CEILING = 1024 * 1024 * 1024;

export const ResourcePin = Type.Object({
  resourceId: Uuid,
  resourceHumanRef: ResourceHumanRef,
  resourceVersionId: Uuid,
  version: VersionLabel,
  contentHash: Hash,
});
export type ResourcePin = Static<typeof ResourcePin>;

export const CatalogVersion = Type.Object({
  id: Uuid,
  version: VersionLabel,
  resourcePins: Type.Array(ResourcePin, { maxItems: MAX_CATALOG_RESOURCES }),
  manifestHash: Hash,
  resourceCount: Counter,
  publishedAt: Type.Optional(DateTime),
});

export const Catalog = Type.Object(
  {
    id: Uuid,
    sourceScope: SourceScope,
    owner: Owner,
    slug: Slug,
    humanRef: CatalogHumanRef,
    name: Name(160),
    status: LifecycleStatus,
    createdAt: DateTime,
    updatedAt: DateTime,
    archivedAt: Type.Optional(DateTime),
    description: Type.Optional(Description),
    facets: Type.Optional(Facets),
    currentVersion: Type.Optional(CatalogVersion),
  },
  { $id: 'Catalog' },
);
export type Catalog = Static<typeof Catalog>;

/** Fields of a Resource Version every answer carries; list items carry only these. */
const versionSummaryFields = {
  id: Uuid,
  version: VersionLabel,
  contentHash: Hash,
  contentSizeBytes: Counter,
  mediaType: Name(120),
  storageBackend: StorageBackend,
  status: VersionStatus,
  publishedAt: Type.Optional(DateTime),
  supersededAt: Type.Optional(DateTime),
  archivedAt: Type.Optional(DateTime),
};

export const ResourceVersionSummary = Type.Object(versionSummaryFields, { $id: 'ResourceVersionSummary' });
export type ResourceVersionSummary = Static<typeof ResourceVersionSummary>;

export const ResourceVersionDetail = Type.Object(
  {
    ...versionSummaryFields,
    manifest: Manifest,
    content: Type.String({
      maxLength: MAX_CONTENT_BYTES_CEILING,
      description: 'the content, at most PLAYBOOK_MAX_CONTENT_BYTES (default 16 MiB) of UTF-8',
    }),
  },
  { $id: 'ResourceVersion' },
);
export type ResourceVersionDetail = Static<typeof ResourceVersionDetail>;

const resourceFields = {
  id: Uuid,
  catalogId: Uuid,
  catalogHumanRef: CatalogHumanRef,
  sourceScope: SourceScope,
  slug: Slug,
  humanRef: ResourceHumanRef,
  kind: ResourceKind,
  title: Name(220),
  status: LifecycleStatus,
  manifest: Manifest,
  createdAt: DateTime,
  updatedAt: DateTime,
  archivedAt: Type.Optional(DateTime),
  description: Type.Optional(Description),
  facets: Type.Optional(Facets),
};

export const ResourceListItem = Type.Object(
  { ...resourceFields, currentVersion: Type.Optional(Type.Ref(ResourceVersionSummary)) },
  { $id: 'ResourceListItem' },
);
export type ResourceListItem = Static<typeof ResourceListItem>;

export const ResourceDetail = Type.Object(
  { ...resourceFields, currentVersion: Type.Ref(ResourceVersionDetail) },
  { $id: 'Resource' },
);
export type ResourceDetail = Static<typeof ResourceDetail>;

/** Every named schema, registered once with Fastify so that answers and the OpenAPI document share them. */
export const playbookSchemas = [
  Catalog,
  ResourceVersionSummary,
  ResourceVersionDetail,
  ResourceListItem,
  ResourceDetail,
];

// Requests

/** Array filters take repeated parameters and comma-separated values; the query hook splits the latter. */
export const ListCatalogsQuery = Type.Object(
  {
    sourceScope: Type.Optional(
      Type.Array(SourceScope, {
        maxItems: SOURCE_SCOPES.length,
        description: 'svc, account; repeat or comma-separate',
      }),
    ),
    capability: Type.Optional(Type.String({ minLength: 1, maxLength: 80 })),
    ...PageQuery,
  },
  { additionalProperties: false },
);
export type ListCatalogsQuery = Static<typeof ListCatalogsQuery>;

export const ListResourcesQuery = Type.Object(
  {
    kind: Type.Optional(
      Type.Array(ResourceKind, {
        maxItems: RESOURCE_KINDS.length,
        description: 'Resource kinds; repeat or comma-separate',
      }),
    ),
    ...PageQuery,
  },
  { additionalProperties: false },
);
export type ListResourcesQuery = Static<typeof ListResourcesQuery>;

/** The detail operations take no query parameters; any sent is named in a 400 (D3). */
export const NoQuery = Type.Object({}, { additionalProperties: false });

export const ListVersionsQuery = Type.Object({ ...PageQuery }, { additionalProperties: false });
export type ListVersionsQuery = Static<typeof ListVersionsQuery>;

export const CatalogParams = Type.Object({ owner: Owner, catalogSlug: Slug });
export type CatalogParams = Static<typeof CatalogParams>;

/** A Resource named by its human ref, `<owner>/<catalogSlug>/<resourceSlug>` (D29). */
export const ResourceRefParams = Type.Object({ owner: Owner, catalogSlug: Slug, resourceSlug: Slug });
export type ResourceRefParams = Static<typeof ResourceRefParams>;

export const ResourceParams = Type.Object({ resourceId: Uuid });
export type ResourceParams = Static<typeof ResourceParams>;

export const VersionParams = Type.Object({ resourceId: Uuid, versionId: Uuid });
export type VersionParams = Static<typeof VersionParams>;

export { FacetValue };
