import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { FastifyRequest } from 'fastify';
import type { ApiKeyService, KeyManager } from '../auth/api-key-service.js';
import { Answer, routeSerializer, sendAnswer } from '../http/answer.js';
import { notModifiedResponse, problemResponses } from '../schemas/common.js';
import {
  ApiKeyPage,
  ApiKeyParams,
  CreateApiKeyBody,
  CreatedApiKey,
  ListApiKeysQuery,
} from '../schemas/identity.js';

const security: { [scheme: string]: string[] }[] = [{ accessToken: [] }];
/** Key management takes a user access token only (contract §4.5): an API key here is a 401. */
const KEY_MANAGEMENT = { auth: { policy: 'access-token' } } as const;

function managerOf(request: FastifyRequest): KeyManager {
  const credential = request.principal?.credential;
  // The auth hook admits only access tokens here; anything else is a wiring bug.
  if (credential?.kind !== 'access-token') throw new Error('key management reached without an access token');
  return credential;
}

/** Key management of D8: create (contract §4.5), list and revoke. */
export function identityRoutes(keys: ApiKeyService): FastifyPluginAsyncTypebox {
  return async (app) => {
    app.post(
      '/v3/identity/api-keys',
      {
        config: KEY_MANAGEMENT,
        schema: {
          operationId: 'createApiKey',
          summary: 'Create an API key for one account; the key string is shown only in this answer',
          description:
            "Mints a key of this deployment's environment for an account the access token lets the user act for. An account holds at most PLAYBOOK_MAX_KEYS_PER_ACCOUNT active keys (400 limit_reached past it).",
          tags: ['identity'],
          security,
          body: CreateApiKeyBody,
          response: {
            201: {
              ...CreatedApiKey,
              description: 'The new key, with its key string: keep it now, it is never shown again',
            },
            ...problemResponses(400, 401, 403, 429, 500, 503),
          },
        },
      },
      async (request, reply) => {
        const created = await keys.createFor(managerOf(request), request.body);
        // The answer holds a secret: no cache may keep it.
        reply.code(201).header('cache-control', 'no-store');
        return created;
      },
    );

    app.route({
      // A read like the playbook's: HEAD answers as GET does, 304 included.
      method: ['GET', 'HEAD'],
      url: '/v3/identity/api-keys',
      config: KEY_MANAGEMENT,
      schema: {
        operationId: 'listApiKeys',
        summary: "List an account's API keys, without their secrets",
        description:
          'Every key of the account, revoked and expired ones included, oldest first, with when each was last used.',
        tags: ['identity'],
        security,
        querystring: ListApiKeysQuery,
        response: {
          200: { ...ApiKeyPage, description: 'One page of keys, and where it is in the whole list' },
          ...notModifiedResponse,
          ...problemResponses(400, 401, 403, 429, 500, 503),
        },
      },
      handler: async (request, reply) => {
        const { accountId, ...page } = request.query;
        const list = await keys.listFor(managerOf(request), accountId, page);
        // Like every other read (D11), never kept: a changed lastUsedAt shows at once.
        return sendAnswer(request, reply, Answer.json(routeSerializer<ApiKeyPage>(reply)(list)));
      },
    });

    app.delete(
      '/v3/identity/api-keys/:keyId',
      {
        config: KEY_MANAGEMENT,
        schema: {
          operationId: 'revokeApiKey',
          summary: 'Revoke an API key; idempotent',
          description:
            'Every instance refuses the key within a second. A key of an account the user may not act for is 404, like one that does not exist.',
          tags: ['identity'],
          security,
          params: ApiKeyParams,
          response: {
            204: Type.Null({ description: 'Revoked (or already revoked)' }),
            ...problemResponses(400, 401, 404, 429, 500, 503),
          },
        },
      },
      async (request, reply) => {
        await keys.revokeFor(managerOf(request), request.params.keyId);
        return reply.code(204).send(null);
      },
    );
  };
}
