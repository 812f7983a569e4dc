import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { FastifyReply } from 'fastify';
import type { Principal } from '../auth/principal.js';
import type { SerializedAnswer } from '../catalog/answer-bodies.js';
import type { PlaybookService } from '../catalog/playbook-service.js';
import { etagMatches, IMMUTABLE, strongEtag } from '../http/caching.js';
import { Page, problemResponses } from '../schemas/common.js';
import {
  Catalog,
  CatalogParams,
  ListCatalogsQuery,
  ListResourcesQuery,
  ListVersionsQuery,
  NoQuery,
  ResourceDetail,
  ResourceListItem,
  ResourceParams,
  ResourceVersionDetail,
  ResourceVersionSummary,
  VersionParams,
} from '../schemas/playbook.js';

const security: { [scheme: string]: string[] }[] = [{ apiKey: [] }, { accessToken: [] }];
const READ = { auth: { policy: 'api-key-or-token', scope: 'playbook:read' } } as const;
const listErrors = problemResponses(400, 401, 403, 429, 500, 503);
const itemErrors = problemResponses(400, 401, 403, 404, 429, 500, 503);

function principalOf(request: { principal: Principal | null }): Principal {
  // The auth hook has run for every route that states a scope; a missing principal is a wiring bug.
  if (!request.principal) throw new Error('route reached without a principal');
  return request.principal;
}

/**
 * Sends an answer the service serialized already, from this route's own response schema (see
 * catalog/serializers.ts), with the strong validator its digest gives. Fastify sends a Buffer as it
 * is, with the content type set here; the route's schema still describes the answer in the OpenAPI
 * document. Bytes rather than a string: a string of half a megabyte would be measured, then encoded
 * again, on every request.
 */
function sendSerialized(reply: FastifyReply, answer: SerializedAnswer): FastifyReply {
  return reply
    .header('etag', strongEtag(answer.digest))
    .type('application/json; charset=utf-8')
    .send(answer.body);
}

/** The read operations of contract.md §4.1-4.4 and the history list of D16. */
export function playbookRoutes(service: PlaybookService): FastifyPluginAsyncTypebox {
  return async (app) => {
    app.get(
      '/v3/playbook/catalogs',
      {
        config: READ,
        schema: {
          operationId: 'listPlaybookCatalogs',
          summary: 'List the Catalogs the caller can use',
          tags: ['playbook'],
          security,
          querystring: ListCatalogsQuery,
          response: { 200: Page(Type.Ref(Catalog)), ...listErrors },
        },
      },
      async (request, reply) =>
        sendSerialized(reply, await service.listCatalogs(principalOf(request), request.query)),
    );

    app.get(
      '/v3/playbook/catalogs/:owner/:catalogSlug/resources',
      {
        config: READ,
        schema: {
          operationId: 'listPlaybookCatalogResources',
          summary: 'List the Resources in one Catalog',
          tags: ['playbook'],
          security,
          params: CatalogParams,
          querystring: ListResourcesQuery,
          response: { 200: Page(Type.Ref(ResourceListItem)), ...itemErrors },
        },
      },
      async (request, reply) =>
        sendSerialized(
          reply,
          await service.listResources(principalOf(request), request.params, request.query),
        ),
    );

    app.get(
      '/v3/playbook/resources/:resourceId',
      {
        config: READ,
        schema: {
          operationId: 'getPlaybookResource',
          summary: 'Get one Resource with its current content',
          tags: ['playbook'],
          security,
          params: ResourceParams,
          querystring: NoQuery,
          response: { 200: Type.Ref(ResourceDetail), ...itemErrors },
        },
      },
      async (request, reply) =>
        sendSerialized(
          reply,
          await service.getResource(principalOf(request), request.params.resourceId.toLowerCase()),
        ),
    );

    app.get(
      '/v3/playbook/resources/:resourceId/versions',
      {
        config: READ,
        schema: {
          operationId: 'listPlaybookResourceVersions',
          summary: "List a Resource's versions, newest first",
          tags: ['playbook'],
          security,
          params: ResourceParams,
          querystring: ListVersionsQuery,
          response: { 200: Page(Type.Ref(ResourceVersionSummary)), ...itemErrors },
        },
      },
      (request) =>
        service.listVersions(principalOf(request), request.params.resourceId.toLowerCase(), request.query),
    );

    app.get(
      '/v3/playbook/resources/:resourceId/versions/:versionId',
      {
        config: READ,
        schema: {
          operationId: 'getPlaybookResourceVersion',
          summary: 'Get one immutable Resource Version with its content',
          tags: ['playbook'],
          security,
          params: VersionParams,
          querystring: NoQuery,
          response: {
            200: Type.Ref(ResourceVersionDetail),
            304: Type.Null({ description: 'Not modified: the If-None-Match validator matches' }),
            ...itemErrors,
          },
        },
      },
      async (request, reply) => {
        const { resourceId, versionId } = request.params;
        const handle = await service.findVersion(
          principalOf(request),
          resourceId.toLowerCase(),
          versionId.toLowerCase(),
        );
        reply.header('etag', handle.etag).header('cache-control', IMMUTABLE);
        // Answered from the metadata alone: a revalidation never loads content.
        if (etagMatches(request.headers['if-none-match'], handle.etag)) return reply.code(304).send(null);
        return service.loadVersion(handle);
      },
    );
  };
}
