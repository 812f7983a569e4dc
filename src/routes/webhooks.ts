import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { FastifyRequest } from 'fastify';
import type { KeyManager } from '../auth/api-key-service.js';
import { Answer, routeSerializer, sendAnswer } from '../http/answer.js';
import { notModifiedResponse, problemResponses } from '../schemas/common.js';
import {
  CreatedWebhookEndpoint,
  CreateWebhookEndpointBody,
  ListWebhookDeliveriesQuery,
  ListWebhookEndpointsQuery,
  MAX_WEBHOOK_ENDPOINTS,
  UpdateWebhookEndpointBody,
  WebhookDelivery,
  WebhookDeliveryAttemptPage,
  WebhookDeliveryParams,
  WebhookEndpoint,
  WebhookEndpointPage,
  WebhookEndpointParams,
} from '../schemas/webhooks.js';
import type { WebhookEndpoints } from '../webhooks/webhook-endpoints.js';

const security: { [scheme: string]: string[] }[] = [{ accessToken: [] }];
/** Like key management, webhook endpoints take a user's access token only: an API key here is a 401. */
const USER_ONLY = { auth: { policy: 'access-token' } } as const;
const tags = ['webhooks'];
const BASE = '/v3/identity/webhook-endpoints';

function userOf(request: FastifyRequest): KeyManager {
  const credential = request.principal?.credential;
  // The auth hook admits only access tokens here; anything else is a wiring bug.
  if (credential?.kind !== 'access-token')
    throw new Error('webhook management reached without an access token');
  return { subject: credential.subject, accounts: credential.accounts, requestId: request.id };
}

/** Webhook endpoints (D28): an account's subscriptions to its changes, managed by its users. */
export function webhookRoutes(endpoints: WebhookEndpoints): FastifyPluginAsyncTypebox {
  return async (app) => {
    app.post(
      BASE,
      {
        config: USER_ONLY,
        schema: {
          operationId: 'createWebhookEndpoint',
          summary:
            'Subscribe an https endpoint to changes of an account; the signing secret is shown only in this answer',
          description: `Every change of the account of a type in events (and every change of the service's own Catalogs and Resources of such a type) is POSTed to url, signed with the secret as the Standard Webhooks specification says, and retried for about a day until the endpoint answers 2xx. An account holds at most ${MAX_WEBHOOK_ENDPOINTS} endpoints (400 limit_reached past it).`,
          tags,
          security,
          body: CreateWebhookEndpointBody,
          response: {
            201: {
              ...Type.Ref(CreatedWebhookEndpoint),
              description: 'The new endpoint, with its signing secret: keep it now, it is never shown again',
            },
            ...problemResponses(400, 401, 403, 429, 500, 503),
          },
        },
      },
      async (request, reply) => {
        const created = await endpoints.createFor(userOf(request), request.body);
        // The answer holds a secret: no cache may keep it.
        reply.code(201).header('cache-control', 'no-store');
        return created;
      },
    );

    app.route({
      method: ['GET', 'HEAD'],
      url: BASE,
      config: USER_ONLY,
      schema: {
        operationId: 'listWebhookEndpoints',
        summary: "List an account's webhook endpoints, without their secrets",
        description: 'Every endpoint of the account, enabled or disabled, oldest first.',
        tags,
        security,
        querystring: ListWebhookEndpointsQuery,
        response: {
          200: {
            ...WebhookEndpointPage,
            description: 'One page of endpoints, and where it is in the whole list',
          },
          ...notModifiedResponse,
          ...problemResponses(400, 401, 403, 429, 500, 503),
        },
      },
      handler: async (request, reply) => {
        const { accountId, ...page } = request.query;
        const list = await endpoints.listFor(userOf(request), accountId, page);
        return sendAnswer(request, reply, Answer.json(routeSerializer<WebhookEndpointPage>(reply)(list)));
      },
    });

    app.route({
      method: ['GET', 'HEAD'],
      url: `${BASE}/:endpointId`,
      config: USER_ONLY,
      schema: {
        operationId: 'getWebhookEndpoint',
        summary: 'Get one webhook endpoint, without its secret',
        description:
          'An endpoint of an account the user may not act for is 404, like one that does not exist.',
        tags,
        security,
        params: WebhookEndpointParams,
        response: {
          200: { ...Type.Ref(WebhookEndpoint), description: 'The endpoint' },
          ...notModifiedResponse,
          ...problemResponses(400, 401, 404, 429, 500, 503),
        },
      },
      handler: async (request, reply) => {
        const endpoint = await endpoints.getFor(userOf(request), request.params.endpointId);
        return sendAnswer(request, reply, Answer.json(routeSerializer<WebhookEndpoint>(reply)(endpoint)));
      },
    });

    app.patch(
      `${BASE}/:endpointId`,
      {
        config: USER_ONLY,
        schema: {
          operationId: 'updateWebhookEndpoint',
          summary: "Change a webhook endpoint's URL, events, description or status",
          description:
            'Fields left out stay as they are. status disabled stops deliveries to the endpoint (what is due waits); enabled starts them again. The signing secret does not change.',
          tags,
          security,
          params: WebhookEndpointParams,
          body: UpdateWebhookEndpointBody,
          response: {
            200: { ...Type.Ref(WebhookEndpoint), description: 'The endpoint as it is now' },
            ...problemResponses(400, 401, 404, 429, 500, 503),
          },
        },
      },
      async (request, reply) => {
        const updated = await endpoints.updateFor(userOf(request), request.params.endpointId, request.body);
        reply.header('cache-control', 'no-store');
        return updated;
      },
    );

    app.delete(
      `${BASE}/:endpointId`,
      {
        config: USER_ONLY,
        schema: {
          operationId: 'deleteWebhookEndpoint',
          summary: 'Delete a webhook endpoint, with what was due to it and its delivery list',
          description:
            'Nothing more is sent to it, what was still due included. An endpoint of an account the user may not act for is 404, like one that does not exist.',
          tags,
          security,
          params: WebhookEndpointParams,
          response: {
            204: Type.Null({ description: 'Deleted' }),
            ...problemResponses(400, 401, 404, 429, 500, 503),
          },
        },
      },
      async (request, reply) => {
        await endpoints.deleteFor(userOf(request), request.params.endpointId);
        return reply.code(204).send(null);
      },
    );

    app.route({
      method: ['GET', 'HEAD'],
      url: `${BASE}/:endpointId/deliveries`,
      config: USER_ONLY,
      schema: {
        operationId: 'listWebhookDeliveries',
        summary: "List a webhook endpoint's delivery attempts, newest first",
        description:
          'Each attempt to deliver an event: its event id and type, which attempt it was, the status the endpoint answered, how long it took, why it failed (in words, and in one word: reason), and when the delivery is tried next. A delivery given up unsent because more deliveries were pending to the endpoint than the deployment allows is listed as a failed attempt with the reason backlog_exceeded. Attempts are kept for 30 days.',
        tags,
        security,
        params: WebhookEndpointParams,
        querystring: ListWebhookDeliveriesQuery,
        response: {
          200: {
            ...WebhookDeliveryAttemptPage,
            description: 'One page of attempts, and where it is in the whole list',
          },
          ...notModifiedResponse,
          ...problemResponses(400, 401, 404, 429, 500, 503),
        },
      },
      handler: async (request, reply) => {
        const list = await endpoints.deliveriesFor(userOf(request), request.params.endpointId, request.query);
        return sendAnswer(
          request,
          reply,
          Answer.json(routeSerializer<WebhookDeliveryAttemptPage>(reply)(list)),
        );
      },
    });

    app.post(
      `${BASE}/:endpointId/deliveries/:deliveryId/retry`,
      {
        config: USER_ONLY,
        schema: {
          operationId: 'retryWebhookDelivery',
          summary: 'Send a delivery again, now',
          description:
            'The delivery is due at once, with the same webhook-id, whether it failed (given up unsent past the backlog bound, backlog_exceeded, included), succeeded or is waiting for its next retry. A disabled endpoint is sent nothing (409 endpoint_disabled).',
          tags,
          security,
          params: WebhookDeliveryParams,
          response: {
            202: { ...Type.Ref(WebhookDelivery), description: 'The delivery, due now' },
            ...problemResponses(400, 401, 404, 409, 429, 500, 503),
          },
        },
      },
      async (request, reply) => {
        const { endpointId, deliveryId } = request.params;
        const delivery = await endpoints.retryFor(userOf(request), endpointId, deliveryId);
        reply.code(202).header('cache-control', 'no-store');
        return delivery;
      },
    );

    app.post(
      `${BASE}/:endpointId/test`,
      {
        config: USER_ONLY,
        schema: {
          operationId: 'sendWebhookTestEvent',
          summary: 'Send a test event (webhook.test) to a webhook endpoint',
          description:
            'A delivery like any other, signed and retried, whatever types the endpoint takes: a way to check a receiver. A disabled endpoint is sent nothing (409 endpoint_disabled).',
          tags,
          security,
          params: WebhookEndpointParams,
          response: {
            202: { ...Type.Ref(WebhookDelivery), description: 'The test delivery, due now' },
            ...problemResponses(400, 401, 404, 409, 429, 500, 503),
          },
        },
      },
      async (request, reply) => {
        const delivery = await endpoints.testFor(userOf(request), request.params.endpointId);
        reply.code(202).header('cache-control', 'no-store');
        return delivery;
      },
    );
  };
}
