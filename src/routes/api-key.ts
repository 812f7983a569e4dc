import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { ApiKeyService } from '../auth/api-key-service.js';
import { Answer, routeSerializer, sendAnswer } from '../http/answer.js';
import { streamedJsonBodyParser } from '../http/json-body.js';
import { notModifiedResponse, problemResponses } from '../schemas/common.js';
import { ApiKey, ApiKeyParams, KeyUsage, KeyUsageQuery, UpdateApiKeyBody } from '../schemas/identity.js';
import { KEY_MANAGEMENT, managerOf, security } from './key-management.js';

/** RFC 7396's media type of a JSON Merge Patch, taken beside `application/json`. */
const MERGE_PATCH = 'application/merge-patch+json';

/** One key of D32: read it, change its name, expiry and restrictions, and read its usage. */
export function apiKeyRoutes(keys: ApiKeyService): FastifyPluginAsyncTypebox {
  return async (app) => {
    app.addContentTypeParser(MERGE_PATCH, streamedJsonBodyParser);

    app.route({
      method: ['GET', 'HEAD'],
      url: '/v3/identity/api-keys/:keyId',
      config: KEY_MANAGEMENT,
      schema: {
        operationId: 'getApiKey',
        summary: 'Read one API key, without its secret',
        description:
          'The key as the list shows it, restrictions included. A key of an account the user may not act for is 404, like one that does not exist.',
        tags: ['identity'],
        security,
        params: ApiKeyParams,
        response: {
          200: { ...ApiKey, description: 'The key' },
          ...notModifiedResponse,
          ...problemResponses(400, 401, 404, 429, 500, 503),
        },
      },
      handler: async (request, reply) => {
        const key = await keys.getFor(managerOf(request), request.params.keyId);
        // Never kept, like the list: a changed lastUsedAt shows at once.
        return sendAnswer(request, reply, Answer.json(routeSerializer<ApiKey>(reply)(key)));
      },
    });

    app.route({
      method: ['GET', 'HEAD'],
      url: '/v3/identity/api-keys/:keyId/usage',
      config: KEY_MANAGEMENT,
      schema: {
        operationId: 'getApiKeyUsage',
        summary: 'Read how an API key was used: its answers by day or hour, and its last use',
        description:
          'Every bucket from the one that holds from (7 days back by default, at most 90) to to (now by default), by UTC day or hour, each counting the answers the key got by outcome: success (below 400), clientError (other 4xx), unauthorized (401 and 403 of the key: a wrong secret, revoked or expired, a scope or an address refused), rateLimited (429) and serverError (5xx); and the time and client address of its last use. Counts are gathered in memory and written at most once a minute by each instance: what another instance counted in the last minute may not show yet. A key of an account the user may not act for is 404.',
        tags: ['identity'],
        security,
        params: ApiKeyParams,
        querystring: KeyUsageQuery,
        response: {
          200: { ...KeyUsage, description: "The key's usage" },
          ...notModifiedResponse,
          ...problemResponses(400, 401, 404, 429, 500, 503),
        },
      },
      handler: async (request, reply) => {
        const usage = await keys.usageFor(managerOf(request), request.params.keyId, request.query);
        return sendAnswer(request, reply, Answer.json(routeSerializer<KeyUsage>(reply)(usage)));
      },
    });

    app.patch(
      '/v3/identity/api-keys/:keyId',
      {
        config: KEY_MANAGEMENT,
        schema: {
          operationId: 'updateApiKey',
          summary: "Change an API key's name, expiry or restrictions",
          description:
            'A JSON Merge Patch (RFC 7396, sent as application/merge-patch+json or application/json): a field left out is unchanged, null lifts it ("restrictions": null lifts every restriction, "expiresAt": null the expiry). Restrictions limit the key to Catalogs (catalogs: owner/slug, or owner/* for every Catalog of an owner; service Catalogs are outside unless named; a Catalog outside answers 404 to every read and write of the key and leaves every list and its sync feed), to client addresses (allowedIps: IPv4 and IPv6 addresses and CIDR ranges; a request from elsewhere is 403 ip_not_allowed) and to a rate of its own (rateLimit, at most the deployment\'s: both count, and the RateLimit headers describe the one with fewer requests left). Every instance applies a change within a second; a sync position the key made before it answers 410 sync_token_expired. A revoked or expired key is 409 key_inactive, a rolled one 409 key_already_rolled; a key of an account the user may not act for is 404. Nothing is written on a refusal.',
          tags: ['identity'],
          security,
          consumes: [MERGE_PATCH, 'application/json'],
          params: ApiKeyParams,
          body: UpdateApiKeyBody,
          response: {
            200: { ...ApiKey, description: 'The key as it is now' },
            ...problemResponses(400, 401, 404, 409, 415, 429, 500, 503),
          },
        },
      },
      async (request, reply) => {
        const key = await keys.updateFor(managerOf(request), request.params.keyId, request.body);
        reply.header('cache-control', 'no-store');
        return key;
      },
    );
  };
}
