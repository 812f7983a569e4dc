import { type Static, Type } from '@sinclair/typebox';
import { MAX_PAGE_SIZE, StringEnum, Uuid } from './common.js';
import { Catalog, ResourceListItem } from './playbook.js';

/**
 * The sync feed (D27): an initial sync of everything a caller can see, then only what changed,
 * each page carrying the position to go on from.
 */

/** The longest a request may be held waiting for a change, in seconds. */
export const MAX_SYNC_WAIT_S = 60;

/** What a sync page holds by default: the most a page may hold. */
export const DEFAULT_SYNC_PAGE_SIZE = MAX_PAGE_SIZE;

/** The entities a sync page speaks of. */
export const SYNC_ENTITIES = ['catalog', 'resource'] as const;
export type SyncEntity = (typeof SYNC_ENTITIES)[number];

/** A position in the feed: base64url, made and read by the service alone. */
export const SyncPosition = Type.String({
  minLength: 16,
  maxLength: 2048,
  pattern: '^[A-Za-z0-9_-]+$',
  description: 'An opaque position in the sync feed, made by the service for one caller; never parse it',
});

export const SyncQuery = Type.Object(
  {
    syncToken: Type.Optional(
      Type.Unsafe<string>({
        ...SyncPosition,
        description:
          'The nextSyncToken of an earlier sync: answers what changed since. Without it (and without pageToken), an initial sync',
      }),
    ),
    pageToken: Type.Optional(
      Type.Unsafe<string>({
        ...SyncPosition,
        description: 'The nextPageToken of the previous page: the next page of the same sync',
      }),
    ),
    pageSize: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: MAX_PAGE_SIZE,
        description: `items per page, default ${DEFAULT_SYNC_PAGE_SIZE}`,
      }),
    ),
    wait: Type.Optional(
      Type.Integer({
        minimum: 0,
        maximum: MAX_SYNC_WAIT_S,
        description:
          'With syncToken only: when nothing changed yet, seconds to hold the request until something does (answered within a second of the change), or to answer an empty page at the end',
      }),
    ),
  },
  { additionalProperties: false },
);
export type SyncQuery = Static<typeof SyncQuery>;

export const SyncCatalogItem = Type.Object(
  { type: Type.Literal('catalog'), catalog: Type.Ref(Catalog) },
  { $id: 'SyncCatalogItem', description: 'A Catalog as it is now, as the Catalogs list shows it' },
);
export type SyncCatalogItem = Static<typeof SyncCatalogItem>;

export const SyncResourceItem = Type.Object(
  { type: Type.Literal('resource'), resource: Type.Ref(ResourceListItem) },
  {
    $id: 'SyncResourceItem',
    description: "A Resource as it is now, as a Catalog's Resources list shows it (no content)",
  },
);
export type SyncResourceItem = Static<typeof SyncResourceItem>;

export const SyncRemovedItem = Type.Object(
  {
    type: Type.Literal('removed'),
    entity: StringEnum(SYNC_ENTITIES),
    id: Uuid,
  },
  {
    $id: 'SyncRemovedItem',
    description:
      'Something that is no longer visible to the caller: drop it. A removed Catalog takes its Resources with it; an id never held may be ignored',
  },
);
export type SyncRemovedItem = Static<typeof SyncRemovedItem>;

export type SyncItem = SyncCatalogItem | SyncResourceItem | SyncRemovedItem;

export const SyncPage = Type.Object(
  {
    data: Type.Array(
      Type.Union([Type.Ref(SyncCatalogItem), Type.Ref(SyncResourceItem), Type.Ref(SyncRemovedItem)]),
      {
        maxItems: MAX_PAGE_SIZE,
      },
    ),
    nextPageToken: Type.Optional(
      Type.Unsafe<string>({
        ...SyncPosition,
        description: 'There is more of this sync: ask for it with pageToken',
      }),
    ),
    nextSyncToken: Type.Optional(
      Type.Unsafe<string>({
        ...SyncPosition,
        description: 'This sync is complete: keep it, and ask later with syncToken for what changed since',
      }),
    ),
  },
  {
    $id: 'SyncPage',
    description: 'One page of a sync: its items, and exactly one of nextPageToken and nextSyncToken',
  },
);
export type SyncPage = Static<typeof SyncPage>;

/** Every named schema of the sync feed, registered once with Fastify (documentation.ts). */
export const syncSchemas = [SyncCatalogItem, SyncResourceItem, SyncRemovedItem, SyncPage];
