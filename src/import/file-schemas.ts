import { type Static, Type } from '@sinclair/typebox';
import { Description, Facets, LifecycleStatus, Manifest, VersionLabel } from '../schemas/common.js';
import {
  Catalog,
  ResourceDetail,
  ResourceKind,
  ResourceVersionSummary,
  StorageBackend,
} from '../schemas/playbook.js';
import { compileCheck } from '../schemas/schema-check.js';

/**
 * The two file formats of an import tree (D15), built from the contract's own schemas so that every
 * limit is written once, and checked as request bodies are (schemas/schema-check.ts).
 */

/** `<catalogSlug>/catalog.json`. */
export const CatalogFile = Type.Object(
  {
    name: Catalog.properties.name,
    version: VersionLabel,
    status: Type.Optional(LifecycleStatus),
    description: Type.Optional(Description),
    facets: Type.Optional(Facets),
  },
  { additionalProperties: false },
);
export type CatalogFile = Static<typeof CatalogFile>;

/** `<catalogSlug>/resources/<resourceSlug>.json`: exactly one of `content` and `contentFile`. */
export const ResourceFile = Type.Object(
  {
    kind: ResourceKind,
    title: ResourceDetail.properties.title,
    version: VersionLabel,
    mediaType: ResourceVersionSummary.properties.mediaType,
    status: Type.Optional(LifecycleStatus),
    description: Type.Optional(Description),
    facets: Type.Optional(Facets),
    manifest: Type.Optional(Manifest),
    storageBackend: Type.Optional(StorageBackend),
    content: Type.Optional(Type.String()),
    contentFile: Type.Optional(Type.String({ minLength: 1, maxLength: 1000 })),
  },
  { additionalProperties: false },
);
export type ResourceFile = Static<typeof ResourceFile>;

// Compiled once: a large tree checks thousands of files against the same two schemas.
export const catalogFileCheck = compileCheck(CatalogFile, true);
export const resourceFileCheck = compileCheck(ResourceFile, true);
