import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { Principal } from '../auth/principal.js';
import type { PlaybookService } from '../catalog/playbook-service.js';
import { routeSerializer, sendAnswer } from '../http/answer.js';
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
/** Reads answer HEAD as GET, without the body (D11). */
const GET_AND_HEAD = ['GET', 'HEAD'];
const notModified = {
  304: Type.Null({ description: 'Not modified: If-None-Match names the validator of this representation' }),
};
const listErrors = problemResponses(400, 401, 403, 429, 500, 503);
const itemErrors = problemResponses(400, 401, 403, 404, 429, 500, 503);

function principalOf(request: { principal: Principal | null }): Principal {
  // The auth hook has run for every route that states a scope; a missing principal is a wiring bug.
  if (!request.principal) throw new Error('route reached without a principal');
  return request.principal;
}

/**
 * The read operations of contract.md §4.1-4.4 and the history list of D16. Each route states its
 * schema and scope, asks the service for the answer, and sends it with `sendAnswer`.
 */
export function playbookRoutes(service: PlaybookService): FastifyPluginAsyncTypebox {
  return async (app) => {
    app.route({
      method: GET_AND_HEAD,
      url: '/v3/playbook/catalogs',
      config: READ,
      schema: {
        operationId: 'listPlaybookCatalogs',
        summary: 'List the Catalogs the caller can use',
        tags: ['playbook'],
        security,
        querystring: ListCatalogsQuery,
        response: { 200: Page(Type.Ref(Catalog)), ...notModified, ...listErrors },
      },
      handler: async (request, reply) =>
        sendAnswer(
          request,
          reply,
          await service.listCatalogs(principalOf(request), request.query, routeSerializer(reply)),
        ),
    });

    app.route({
      method: GET_AND_HEAD,
      url: '/v3/playbook/catalogs/:owner/:catalogSlug/resources',
      config: READ,
      schema: {
        operationId: 'listPlaybookCatalogResources',
        summary: 'List the Resources in one Catalog',
        tags: ['playbook'],
        security,
        params: CatalogParams,
        querystring: ListResourcesQuery,
        response: { 200: Page(Type.Ref(ResourceListItem)), ...notModified, ...itemErrors },
      },
      handler: async (request, reply) =>
        sendAnswer(
          request,
          reply,
          await service.listResources(
            principalOf(request),
            request.params,
            request.query,
            routeSerializer(reply),
          ),
        ),
    });

    app.route({
      method: GET_AND_HEAD,
      url: '/v3/playbook/resources/:resourceId',
      config: READ,
      schema: {
        operationId: 'getPlaybookResource',
        summary: 'Get one Resource with its current content',
        tags: ['playbook'],
        security,
        params: ResourceParams,
        querystring: NoQuery,
        response: { 200: Type.Ref(ResourceDetail), ...notModified, ...itemErrors },
      },
      handler: async (request, reply) =>
        sendAnswer(
          request,
          reply,
          await service.getResource(
            principalOf(request),
            request.params.resourceId.toLowerCase(),
            routeSerializer(reply),
          ),
        ),
    });

    app.route({
      method: GET_AND_HEAD,
      url: '/v3/playbook/resources/:resourceId/versions',
      config: READ,
      schema: {
        operationId: 'listPlaybookResourceVersions',
        summary: "List a Resource's versions, newest first",
        tags: ['playbook'],
        security,
        params: ResourceParams,
        querystring: ListVersionsQuery,
        response: { 200: Page(Type.Ref(ResourceVersionSummary)), ...notModified, ...itemErrors },
      },
      handler: async (request, reply) =>
        sendAnswer(
          request,
          reply,
          await service.listVersions(
            principalOf(request),
            request.params.resourceId.toLowerCase(),
            request.query,
            routeSerializer(reply),
          ),
        ),
    });

    app.route({
      method: GET_AND_HEAD,
      url: '/v3/playbook/resources/:resourceId/versions/:versionId',
      config: READ,
      schema: {
        operationId: 'getPlaybookResourceVersion',
        summary: 'Get one Resource Version with its content',
        tags: ['playbook'],
        security,
        params: VersionParams,
        querystring: NoQuery,
        response: { 200: Type.Ref(ResourceVersionDetail), ...notModified, ...itemErrors },
      },
      handler: async (request, reply) =>
        sendAnswer(
          request,
          reply,
          await service.getVersion(
            principalOf(request),
            request.params.resourceId.toLowerCase(),
            request.params.versionId.toLowerCase(),
            routeSerializer(reply),
          ),
        ),
    });
  };
}
