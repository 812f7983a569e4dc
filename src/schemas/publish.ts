import { type Static, Type } from '@sinclair/typebox';
import {
  Counter,
  Description,
  Facets,
  LifecycleStatus,
  Manifest,
  Name,
  Slug,
  StringEnum,
  VersionLabel,
} from './common.js';
import {
  Catalog,
  MAX_CATALOG_RESOURCES,
  MAX_CONTENT_BYTES_CEILING,
  ResourceKind,
  StorageBackend,
} from './playbook.js';

/**
 * D23: what an account publishes over HTTP. The fields of D15's `catalog.json` and resource files,
 * with each Resource's slug and content in the body rather than in file names and content files.
 */

/** One Resource of a published Catalog, or the body of a one-Resource PUT (without `slug`). */
const resourceFields = {
  kind: ResourceKind,
  title: Name(220),
  version: VersionLabel,
  mediaType: Name(120),
  status: Type.Optional(LifecycleStatus),
  description: Type.Optional(Description),
  facets: Type.Optional(Facets),
  manifest: Type.Optional(Manifest),
  storageBackend: Type.Optional(StorageBackend),
  content: Type.String({
    maxLength: MAX_CONTENT_BYTES_CEILING,
    description: 'the content of this version; at most PLAYBOOK_MAX_CONTENT_BYTES UTF-8 bytes',
  }),
};

export const PublishedResource = Type.Object(
  { slug: Slug, ...resourceFields },
  { additionalProperties: false, title: 'PublishedResource' },
);
export type PublishedResource = Static<typeof PublishedResource>;

export const PutCatalogBody = Type.Object(
  {
    name: Catalog.properties.name,
    version: { ...VersionLabel, description: 'the label of the Catalog version a change of pins publishes' },
    status: Type.Optional(LifecycleStatus),
    description: Type.Optional(Description),
    facets: Type.Optional(Facets),
    resources: Type.Array(PublishedResource, {
      maxItems: MAX_CATALOG_RESOURCES,
      description: 'every Resource of the Catalog: those left out are archived',
    }),
  },
  { additionalProperties: false, title: 'PutCatalogBody' },
);
export type PutCatalogBody = Static<typeof PutCatalogBody>;

export const PutResourceBody = Type.Object(resourceFields, {
  additionalProperties: false,
  title: 'PutResourceBody',
});
export type PutResourceBody = Static<typeof PutResourceBody>;

export const PublishVersionBody = Type.Object(
  { version: VersionLabel },
  { additionalProperties: false, title: 'PublishVersionBody' },
);

export const DryRunQuery = Type.Object(
  {
    dryRun: Type.Optional(
      Type.Boolean({ default: false, description: 'report what would change and write nothing' }),
    ),
  },
  { additionalProperties: false },
);

export const CatalogWriteParams = Type.Object({
  owner: StringEnum(['svc', 'org'] as const, {
    description: 'org: your account; svc is written by operators',
  }),
  catalogSlug: Slug,
});
export const ResourceWriteParams = Type.Object({ ...CatalogWriteParams.properties, resourceSlug: Slug });

export const PublishChanges = Type.Object(
  {
    created: Counter,
    updated: Counter,
    superseded: Counter,
    archived: Counter,
    unchanged: Counter,
  },
  { title: 'PublishChanges' },
);
export type PublishChanges = Static<typeof PublishChanges>;

export const PublishReport = Type.Object(
  {
    catalog: Type.Optional({
      ...Type.Ref(Catalog),
      description: 'the Catalog as it now is; absent from a dry run that would create it',
    }),
    changes: PublishChanges,
    dryRun: Type.Boolean(),
    lines: Type.Array(Type.String({ maxLength: 1000 }), {
      maxItems: MAX_CATALOG_RESOURCES + 10,
      description: 'what changed (or would), one line each, as playbook import reports it',
    }),
  },
  { title: 'PublishReport' },
);
export type PublishReport = Static<typeof PublishReport>;
