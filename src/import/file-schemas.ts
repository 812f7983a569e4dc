import { type Static, Type } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { Description, Facets, LIFECYCLE_STATUSES, Manifest, Slug, VersionLabel } from '../schemas/common.js';
import {
  Catalog,
  RESOURCE_KINDS,
  ResourceDetail,
  ResourceVersionSummary,
  STORAGE_BACKENDS,
} from '../schemas/playbook.js';

/**
 * The two file formats of an import tree (D15), built from the contract's own schemas so that every
 * limit is written once.
 *
 * The contract's enums are JSON Schema `enum`s that TypeBox's checker cannot evaluate, so each is
 * restated here as a union of literals built from the same list of values.
 */
function oneOf<const T extends readonly string[]>(values: T) {
  return Type.Union(values.map((value) => Type.Literal(value as T[number])));
}

const Status = oneOf(LIFECYCLE_STATUSES);

/** `<catalogSlug>/catalog.json`. */
export const CatalogFile = Type.Object(
  {
    name: Catalog.properties.name,
    version: VersionLabel,
    status: Type.Optional(Status),
    description: Type.Optional(Description),
    facets: Type.Optional(Facets),
  },
  { additionalProperties: false },
);
export type CatalogFile = Static<typeof CatalogFile>;

/** `<catalogSlug>/resources/<resourceSlug>.json`: exactly one of `content` and `contentFile`. */
export const ResourceFile = Type.Object(
  {
    kind: oneOf(RESOURCE_KINDS),
    title: ResourceDetail.properties.title,
    version: VersionLabel,
    mediaType: ResourceVersionSummary.properties.mediaType,
    status: Type.Optional(Status),
    description: Type.Optional(Description),
    facets: Type.Optional(Facets),
    manifest: Type.Optional(Manifest),
    storageBackend: Type.Optional(oneOf(STORAGE_BACKENDS)),
    content: Type.Optional(Type.String()),
    contentFile: Type.Optional(Type.String({ minLength: 1, maxLength: 1000 })),
  },
  { additionalProperties: false },
);
export type ResourceFile = Static<typeof ResourceFile>;

// Compiled once: a large tree checks thousands of files against the same two schemas.
export const catalogFileChecker = TypeCompiler.Compile(CatalogFile);
export const resourceFileChecker = TypeCompiler.Compile(ResourceFile);
export const slugChecker = TypeCompiler.Compile(Slug);
