import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { FastifyReply } from 'fastify';
import { Answer, sendAnswer } from '../http/answer.js';
import { notModifiedResponse, problemResponses } from '../schemas/common.js';
import {
  type SyncCatalogItem,
  SyncCatalogItem as SyncCatalogItemSchema,
  type SyncItem,
  SyncPage,
  SyncQuery,
  type SyncRemovedItem,
  SyncRemovedItem as SyncRemovedItemSchema,
  type SyncResourceItem,
  SyncResourceItem as SyncResourceItemSchema,
} from '../schemas/sync.js';
import type { SyncAnswer, SyncFeed } from '../sync/sync-feed.js';
import { principalOf, READ, security } from './playbook.js';

/** Serializers of each kind of item, compiled once by Fastify from their schemas. */
interface ItemSerializers {
  readonly catalog: (item: SyncCatalogItem) => string;
  readonly resource: (item: SyncResourceItem) => string;
  readonly removed: (item: SyncRemovedItem) => string;
}

/**
 * A page as JSON text: each item by the serializer of its own kind. The page's schema is a union of
 * the three, which a serializer resolves by validating each item against each kind (a Catalog with
 * 100,000 pins, several times over); the item's `type` already says which it is.
 */
function pageText(answer: SyncAnswer, serializers: ItemSerializers): string {
  const items = answer.data.map((item: SyncItem) =>
    item.type === 'catalog'
      ? serializers.catalog(item)
      : item.type === 'resource'
        ? serializers.resource(item)
        : serializers.removed(item),
  );
  const position =
    answer.nextPageToken !== undefined
      ? `"nextPageToken":${JSON.stringify(answer.nextPageToken)}`
      : `"nextSyncToken":${JSON.stringify(answer.nextSyncToken)}`;
  return `{"data":[${items.join(',')}],${position}}`;
}

function serializersOf(reply: FastifyReply): ItemSerializers {
  return {
    catalog: reply.compileSerializationSchema(SyncCatalogItemSchema) as ItemSerializers['catalog'],
    resource: reply.compileSerializationSchema(SyncResourceItemSchema) as ItemSerializers['resource'],
    removed: reply.compileSerializationSchema(SyncRemovedItemSchema) as ItemSerializers['removed'],
  };
}

/**
 * `GET /v3/playbook/sync` (D27): an initial sync, then what changed, with requests held until
 * something does. A held request whose client goes away is let go at once (`onRequestAbort`).
 */
export function syncRoutes(feed: SyncFeed): FastifyPluginAsyncTypebox {
  return async (app) => {
    app.route({
      method: 'GET',
      url: '/v3/playbook/sync',
      config: READ,
      schema: {
        operationId: 'syncPlaybook',
        summary: 'Follow every Catalog and Resource the caller can see: an initial sync, then changes',
        description:
          'Without syncToken: an initial sync, pages of every Catalog (as the Catalogs list shows them, pins included) and every Resource (as list items) the caller can see. ' +
          'Follow nextPageToken (as pageToken) until a page gives nextSyncToken; keep that, and ask later with syncToken for what changed since: each Catalog or Resource once, as it is now, in the order of its last change, or {type: "removed"} when the caller can no longer see it (a removed Catalog takes its Resources with it). ' +
          'With wait, a request that finds nothing changed is held until something does (answered within a second of the change) or answered empty at the end of the wait; past the instance’s limit of held requests, 503 with Retry-After. ' +
          'A token is opaque and works for the caller it was made for: another account’s, a damaged one, or a page token given as syncToken is 400 invalid_sync_token; one older than the change log keeps, or made before the account’s plan changed, is 410 sync_token_expired, and the follower starts again with an initial sync.',
        tags: ['playbook'],
        security,
        querystring: SyncQuery,
        response: {
          200: Type.Ref(SyncPage, { description: 'One page of the sync, and the position to go on from' }),
          ...notModifiedResponse,
          ...problemResponses(400, 401, 403, 410, 429, 500, 503),
        },
      },
      onRequestAbort: (request) => {
        request.syncAbort?.abort();
      },
      handler: async (request, reply) => {
        // Aborted when the client goes away while the request is held.
        const abort = new AbortController();
        request.syncAbort = abort;
        const answer = await feed.read(principalOf(request), request.query, abort.signal);
        return sendAnswer(request, reply, Answer.json(pageText(answer, serializersOf(reply))));
      },
    });
  };
}

declare module 'fastify' {
  interface FastifyRequest {
    /** Set while a sync request may be held: aborted when its client goes away. */
    syncAbort?: AbortController;
  }
}
