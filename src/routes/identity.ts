import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { TObject, TSchema } from '@sinclair/typebox';
import { Type } from '@sinclair/typebox';
import type { FastifyRequest } from 'fastify';
import type { ApiKeyService, KeyManager } from '../auth/api-key-service.js';
import { InputError, type InputProblem } from '../errors.js';
import { Answer, routeSerializer, sendAnswer } from '../http/answer.js';
import { problemResponses } from '../schemas/common.js';
import {
  ApiKeyList,
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

function jsonType(value: unknown): string {
  if (Array.isArray(value)) return 'array';
  if (value === null) return 'null';
  if (typeof value === 'number') return Number.isInteger(value) ? 'integer' : 'number';
  return typeof value;
}

function aOrAn(type: unknown): string {
  return `${/^[aeiou]/.test(String(type)) ? 'an' : 'a'} ${String(type)}`;
}

function typeMatches(schema: TSchema, value: unknown): boolean {
  const actual = jsonType(value);
  return schema.type === actual || (schema.type === 'number' && actual === 'integer');
}

/**
 * The shared validator coerces types, which query strings need (everything arrives as text). A JSON
 * body carries its own types, so a mistyped field (`"name": 7`, `"scopes": "playbook:read"`) is
 * refused here, before coercion could make it look right.
 */
function exactJsonTypes(schema: TObject) {
  return async (request: FastifyRequest): Promise<void> => {
    const body = request.body;
    if (jsonType(body) !== 'object') return; // the schema names that problem itself
    const problems: InputProblem[] = [];
    for (const [name, value] of Object.entries(body as Record<string, unknown>)) {
      const property: TSchema | undefined = schema.properties[name];
      if (!property) continue;
      const items: TSchema | undefined = property.items;
      if (!typeMatches(property, value)) {
        problems.push({
          in: 'body',
          name,
          message: `must be ${aOrAn(property.type)}`,
        });
      } else if (items && Array.isArray(value)) {
        value.forEach((item, index) => {
          if (!typeMatches(items, item))
            problems.push({ in: 'body', name: `${name}.${index}`, message: `must be ${aOrAn(items.type)}` });
        });
      }
    }
    if (problems.length > 0) throw new InputError(problems);
  };
}

/** Key management of D8: create (contract §4.5), list and revoke. */
export function identityRoutes(keys: ApiKeyService): FastifyPluginAsyncTypebox {
  return async (app) => {
    app.post(
      '/v3/identity/api-keys',
      {
        config: KEY_MANAGEMENT,
        preValidation: exactJsonTypes(CreateApiKeyBody),
        schema: {
          operationId: 'createApiKey',
          summary: 'Create an API key for one account; the key string is shown only in this answer',
          tags: ['identity'],
          security,
          body: CreateApiKeyBody,
          response: { 201: CreatedApiKey, ...problemResponses(400, 401, 403, 429, 500, 503) },
        },
      },
      async (request, reply) => {
        const created = await keys.createFor(managerOf(request), request.body);
        // The answer holds a secret: no cache may keep it.
        reply.code(201).header('cache-control', 'no-store');
        return created;
      },
    );

    app.get(
      '/v3/identity/api-keys',
      {
        config: KEY_MANAGEMENT,
        schema: {
          operationId: 'listApiKeys',
          summary: "List an account's API keys, without their secrets",
          tags: ['identity'],
          security,
          querystring: ListApiKeysQuery,
          response: { 200: ApiKeyList, ...problemResponses(400, 401, 403, 429, 500, 503) },
        },
      },
      async (request, reply) => {
        const data = await keys.listFor(managerOf(request), request.query.accountId);
        // Like every other read (D11), never kept: a changed lastUsedAt shows at once.
        return sendAnswer(
          request,
          reply,
          Answer.json(routeSerializer<{ data: typeof data }>(reply)({ data })),
        );
      },
    );

    app.delete(
      '/v3/identity/api-keys/:keyId',
      {
        config: KEY_MANAGEMENT,
        schema: {
          operationId: 'revokeApiKey',
          summary: 'Revoke an API key; idempotent',
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
