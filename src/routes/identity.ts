import { hash } from 'node:crypto';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { AuditLog } from '../audit/audit-log.js';
import type { ApiKeyService } from '../auth/api-key-service.js';
import { KEY_IDENTIFIER_HEADER, type LeakReportSignatures, SIGNATURE_HEADER } from '../auth/leak-reports.js';
import type { AccessLimiter } from '../auth/rate-limits.js';
import { AuthenticationError, NotConfiguredError } from '../foundation/errors.js';
import { Answer, routeSerializer, sendAnswer } from '../http/answer.js';
import { jsonBodyParser } from '../http/json-body.js';
import { AuditEventPage, ListAuditEventsQuery } from '../schemas/audit.js';
import { notModifiedResponse, problemResponses } from '../schemas/common.js';
import {
  ApiKeyPage,
  ApiKeyParams,
  CreateApiKeyBody,
  CreatedApiKey,
  DEFAULT_ROLL_OVERLAP_S,
  LeakReport,
  LeakVerdicts,
  ListApiKeysQuery,
  RollApiKeyBody,
} from '../schemas/identity.js';
import { apiKeyRoutes } from './api-key.js';
import { KEY_MANAGEMENT, managerOf, security } from './key-management.js';

export interface IdentityRouteOptions {
  /**
   * Failed leak-report signatures count against the address, as failed credentials do, and reports
   * against their signing key, as requests against their credential (D10).
   */
  readonly limiter: AccessLimiter;
  /** D22's leak reports; without them the operation answers 501. */
  readonly leakSignatures?: LeakReportSignatures;
  /** D23's audit trail, listed for users of an account. */
  readonly audit?: AuditLog;
}

/**
 * Key management of D8, D22 and D32: create (contract §4.5), list, read, change, revoke, roll, and
 * leak reports.
 */
export function identityRoutes(
  keys: ApiKeyService,
  options: IdentityRouteOptions,
): FastifyPluginAsyncTypebox {
  return async (app) => {
    await app.register(leakReportRoute(keys, options));

    app.post(
      '/v3/identity/api-keys',
      {
        config: KEY_MANAGEMENT,
        schema: {
          operationId: 'createApiKey',
          summary: 'Create an API key for one account; the key string is shown only in this answer',
          description:
            "Mints a key of this deployment's environment for an account the access token lets the user act for, limited by restrictions when they are given (Catalogs, client addresses, a rate of its own; see PATCH). An account holds at most PLAYBOOK_MAX_KEYS_PER_ACCOUNT active keys (400 limit_reached past it).",
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
          'Every key of the account, revoked and expired ones included, oldest first, with its restrictions and when each was last used.',
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

    const { audit } = options;
    if (audit) {
      app.route({
        method: ['GET', 'HEAD'],
        url: '/v3/identity/audit-events',
        config: KEY_MANAGEMENT,
        schema: {
          operationId: 'listAuditEvents',
          summary: "List an account's audit events, newest first",
          description:
            "Every write of the account's Catalogs and every key event (creation, roll, revocation, leak revocation), with who did it and the request id. Events are never changed or removed. The filters narrow the list: action (one or more change types), actor (the actor's id), from (at or after) and to (before); a bad one is a 400 naming it.",
          tags: ['identity'],
          security,
          querystring: ListAuditEventsQuery,
          response: {
            200: { ...AuditEventPage, description: 'One page of events, and where it is in the whole list' },
            ...notModifiedResponse,
            ...problemResponses(400, 401, 403, 429, 500, 503),
          },
        },
        handler: async (request, reply) => {
          const { accountId, ...page } = request.query;
          const list = await audit.listFor(managerOf(request), accountId, page);
          return sendAnswer(request, reply, Answer.json(routeSerializer<AuditEventPage>(reply)(list)));
        },
      });
    }

    app.post(
      '/v3/identity/api-keys/:keyId/roll',
      {
        config: KEY_MANAGEMENT,
        // No body at all is the same as an empty one: the overlap has a default.
        preValidation: (request, _reply, done) => {
          request.body ??= {};
          done();
        },
        schema: {
          operationId: 'rollApiKey',
          summary: 'Replace an API key with a new one, the old one working on for an overlap',
          description:
            'Mints a key of the same name, account, scopes and restrictions, without expiry; the old key keeps working for overlapSeconds, then expires. Rotation in one call, with no moment when neither key works. A revoked or expired key cannot be rolled (409 key_inactive); a key of an account the user may not act for is 404.',
          tags: ['identity'],
          security,
          params: ApiKeyParams,
          body: RollApiKeyBody,
          response: {
            201: {
              ...CreatedApiKey,
              description: 'The new key, with its key string: keep it now, it is never shown again',
            },
            ...problemResponses(400, 401, 404, 409, 429, 500, 503),
          },
        },
      },
      async (request, reply) => {
        const overlap = request.body.overlapSeconds ?? DEFAULT_ROLL_OVERLAP_S;
        const rolled = await keys.rollFor(managerOf(request), request.params.keyId, overlap);
        reply.code(201).header('cache-control', 'no-store');
        return rolled;
      },
    );

    await app.register(apiKeyRoutes(keys));
  };
}

/** The raw bytes of each leak report, which its signature covers. */
const rawBodies = new WeakMap<FastifyRequest, Buffer>();

function headerOf(request: FastifyRequest, name: string): string | undefined {
  const value = request.headers[name];
  return typeof value === 'string' ? value : undefined;
}

/**
 * D22: leak reports in the secret scanning partner program's format. Its own plugin, so that the
 * JSON parser that keeps the signed bytes applies to this route alone.
 */
function leakReportRoute(keys: ApiKeyService, options: IdentityRouteOptions): FastifyPluginAsyncTypebox {
  return async (app) => {
    app.removeContentTypeParser('application/json');
    app.addContentTypeParser(
      'application/json',
      { parseAs: 'buffer' },
      (request: FastifyRequest, body: Buffer) => {
        rawBodies.set(request, body as Buffer);
        return jsonBodyParser(request, body);
      },
    );

    // The signature is checked before the body is: an unsigned caller learns nothing of the format.
    const verifySignature = async (request: FastifyRequest, reply: FastifyReply) => {
      const signatures = options.leakSignatures;
      if (!signatures) {
        throw new NotConfiguredError(
          'leak reports are not set up on this deployment (PLAYBOOK_LEAK_REPORT_KEYS_URL)',
        );
      }
      const identifier = headerOf(request, KEY_IDENTIFIER_HEADER);
      try {
        await signatures.verify(
          rawBodies.get(request) ?? Buffer.alloc(0),
          identifier,
          headerOf(request, SIGNATURE_HEADER),
        );
      } catch (error) {
        if (error instanceof AuthenticationError) await options.limiter.recordFailure(request, reply);
        throw error;
      }
      // Reports signed by one key share a budget, as requests made with one API key do (D10).
      await options.limiter.consume(request, reply, `leak-signer:${identifier}`);
    };

    app.post(
      '/v3/identity/api-keys/leaks',
      {
        bodyLimit: 1024 * 1024,
        // A report's credential is its signature: a 401 names the headers that carry it.
        config: {
          challenges: [
            `Signature realm="playbook-leak-reports", headers="${KEY_IDENTIFIER_HEADER} ${SIGNATURE_HEADER}"`,
          ],
        },
        preValidation: verifySignature,
        schema: {
          operationId: 'reportLeakedApiKeys',
          summary: 'Report leaked API keys; every live one is revoked at once',
          description:
            "For GitHub's secret scanning partner program: a JSON array of { token, type, url, source }, signed with ECDSA P-256 over the raw body. Github-Public-Key-Identifier names the key among those listed at PLAYBOOK_LEAK_REPORT_KEYS_URL, Github-Public-Key-Signature carries the base64 DER signature; no other credential is taken. Each reported token that is a key of this deployment is revoked on every instance within a second. The answer is the program's feedback format, one verdict per token, naming the token by its SHA-256.",
          tags: ['identity'],
          security: [{ leakReportSignature: [] }],
          // A deployment without a key list takes no leak reports (the operation answers 501): its
          // document offers neither the operation nor the signature scheme.
          hide: options.leakSignatures === undefined,
          body: LeakReport,
          response: {
            200: { ...LeakVerdicts, description: 'One verdict per reported token, in the order reported' },
            ...problemResponses(400, 401, 429, 500, 501, 503),
          },
        },
      },
      async (request, reply) => {
        const verdicts: LeakVerdicts = [];
        for (const item of request.body) {
          verdicts.push({
            token_hash: hash('sha256', item.token),
            token_type: item.type,
            label: await keys.revokeLeaked(item.token, item.url, request.id),
          });
        }
        reply.header('cache-control', 'no-store');
        return verdicts;
      },
    );
  };
}
