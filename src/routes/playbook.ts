import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { ReadAnswers } from '../answers/read-answers.js';
import type { Principal } from '../auth/principal.js';
import { routeSerializer, sendAnswer } from '../http/answer.js';
import { notModifiedResponse, Page, problemResponses } from '../schemas/common.js';
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
  ResourceRefParams,
  ResourceVersionDetail,
  ResourceVersionSummary,
  VersionParams,
} from '../schemas/playbook.js';

export const security: { [scheme: string]: string[] }[] = [{ apiKey: [] }, { accessToken: [] }];
export const READ = { auth: { policy: 'api-key-or-token', scope: 'playbook:read' } } as const;
/** Reads answer HEAD as GET, without the body (D11). */
const GET_AND_HEAD = ['GET', 'HEAD'];
const listErrors = problemResponses(400, 401, 403, 429, 500, 503);
const itemErrors = problemResponses(400, 401, 403, 404, 429, 500, 503);

export function principalOf(request: { principal: Principal | null }): Principal {
  // The auth hook has run for every route that states a scope; a missing principal is a wiring bug.
  if (!request.principal) throw new Error('route reached without a principal');
  return request.principal;
}

/**
 * The read operations of contract.md §4.1-4.4, the history list of D16 and the reads by human ref of
 * D29. Each route states its schema and scope, asks the service for the answer, and sends it with
 * `sendAnswer`: at once when it is held in memory, once it is made otherwise.
 */
export function playbookRoutes(answers: ReadAnswers): FastifyPluginAsyncTypebox {
  return async (app) => {
    app.route({
      method: GET_AND_HEAD,
      url: '/v3/playbook/catalogs',
      config: READ,
      schema: {
        operationId: 'listPlaybookCatalogs',
        summary: 'List the Catalogs the caller can use',
        description:
          "Service-owned Catalogs first, then the caller's account's, each by slug; drafts are never listed. An API key restricted to some Catalogs lists those alone, and meta.total counts them. Filter by sourceScope and by a capability facet.",
        tags: ['playbook'],
        security,
        querystring: ListCatalogsQuery,
        response: {
          200: Page(Type.Ref(Catalog), {
            description: 'One page of Catalogs, and where it is in the whole list',
          }),
          ...notModifiedResponse,
          ...listErrors,
        },
      },
      handler: (request, reply) =>
        sendAnswer(
          request,
          reply,
          answers.listCatalogs(principalOf(request), request.query, routeSerializer(reply)),
        ),
    });

    app.route({
      method: GET_AND_HEAD,
      url: '/v3/playbook/catalogs/:owner/:catalogSlug/resources',
      config: READ,
      schema: {
        operationId: 'listPlaybookCatalogResources',
        summary: 'List the Resources in one Catalog',
        description:
          "The Catalog's Resources by slug, each with its current version's metadata but not its content or manifest; filter by kind. A Catalog the caller cannot see is 404.",
        tags: ['playbook'],
        security,
        params: CatalogParams,
        querystring: ListResourcesQuery,
        response: {
          200: Page(Type.Ref(ResourceListItem), {
            description: 'One page of Resources, and where it is in the whole list',
          }),
          ...notModifiedResponse,
          ...itemErrors,
        },
      },
      handler: (request, reply) =>
        sendAnswer(
          request,
          reply,
          answers.listResources(principalOf(request), request.params, request.query, routeSerializer(reply)),
        ),
    });

    app.route({
      method: GET_AND_HEAD,
      url: '/v3/playbook/catalogs/:owner/:catalogSlug',
      config: READ,
      schema: {
        operationId: 'getPlaybookCatalog',
        summary: 'Get one Catalog by its human ref',
        description:
          'The Catalog that owner/catalogSlug names, as the list shows it, with its current version and pins. org is always your own account; a Catalog the caller cannot see is 404.',
        tags: ['playbook'],
        security,
        params: CatalogParams,
        querystring: NoQuery,
        response: {
          200: Type.Ref(Catalog, { description: 'The Catalog' }),
          ...notModifiedResponse,
          ...itemErrors,
        },
      },
      handler: (request, reply) =>
        sendAnswer(
          request,
          reply,
          answers.getCatalog(principalOf(request), request.params, routeSerializer(reply)),
        ),
    });

    app.route({
      method: GET_AND_HEAD,
      url: '/v3/playbook/catalogs/:owner/:catalogSlug/resources/:resourceSlug',
      config: READ,
      schema: {
        operationId: 'getPlaybookResourceByRef',
        summary: 'Get one Resource with its current content, by its human ref',
        description:
          "The Resource that owner/catalogSlug/resourceSlug names, exactly as getPlaybookResource answers it by id: its current version, manifest and content included. A plan-gated Resource the caller's plan does not include is 403 plan_required.",
        tags: ['playbook'],
        security,
        params: ResourceRefParams,
        querystring: NoQuery,
        response: {
          200: Type.Ref(ResourceDetail, { description: 'The Resource, with its current version in full' }),
          ...notModifiedResponse,
          ...itemErrors,
        },
      },
      handler: (request, reply) =>
        sendAnswer(
          request,
          reply,
          answers.getResourceByRef(principalOf(request), request.params, routeSerializer(reply)),
        ),
    });

    app.route({
      method: GET_AND_HEAD,
      url: '/v3/playbook/resources/:resourceId',
      config: READ,
      schema: {
        operationId: 'getPlaybookResource',
        summary: 'Get one Resource with its current content',
        description:
          "The Resource and its current version, manifest and content included. A plan-gated Resource the caller's plan does not include is 403 plan_required.",
        tags: ['playbook'],
        security,
        params: ResourceParams,
        querystring: NoQuery,
        response: {
          200: Type.Ref(ResourceDetail, { description: 'The Resource, with its current version in full' }),
          ...notModifiedResponse,
          ...itemErrors,
        },
      },
      handler: (request, reply) =>
        sendAnswer(
          request,
          reply,
          answers.getResource(
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
        description: "The Resource's version history: metadata of each version, without content.",
        tags: ['playbook'],
        security,
        params: ResourceParams,
        querystring: ListVersionsQuery,
        response: {
          200: Page(Type.Ref(ResourceVersionSummary), { description: 'One page of versions, newest first' }),
          ...notModifiedResponse,
          ...itemErrors,
        },
      },
      handler: (request, reply) =>
        sendAnswer(
          request,
          reply,
          answers.listVersions(
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
        description: 'One version of a Resource, current or not, with its manifest and content.',
        tags: ['playbook'],
        security,
        params: VersionParams,
        querystring: NoQuery,
        response: {
          200: Type.Ref(ResourceVersionDetail, { description: 'The Resource Version in full' }),
          ...notModifiedResponse,
          ...itemErrors,
        },
      },
      handler: (request, reply) =>
        sendAnswer(
          request,
          reply,
          answers.getVersion(
            principalOf(request),
            request.params.resourceId.toLowerCase(),
            request.params.versionId.toLowerCase(),
            routeSerializer(reply),
          ),
        ),
    });
  };
}
