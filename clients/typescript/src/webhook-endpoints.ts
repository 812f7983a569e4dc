import type { components, operations } from './openapi.js';
import { everyItem } from './pages.js';
import type { CallOptions, Transport } from './transport.js';

type Schemas = components['schemas'];

export type WebhookEndpoint = Schemas['WebhookEndpoint'];
/** A new endpoint, with its signing secret: shown in this answer only. */
export type CreatedWebhookEndpoint = Schemas['CreatedWebhookEndpoint'];
export type WebhookDelivery = Schemas['WebhookDelivery'];
export type WebhookDeliveryAttempt = Schemas['WebhookDeliveryAttempt'];
export type CreateWebhookEndpointInput =
  operations['createWebhookEndpoint']['requestBody']['content']['application/json'];
export type UpdateWebhookEndpointInput =
  operations['updateWebhookEndpoint']['requestBody']['content']['application/json'];
export type WebhookEndpointPage =
  operations['listWebhookEndpoints']['responses'][200]['content']['application/json'];
export type WebhookEndpointQuery = operations['listWebhookEndpoints']['parameters']['query'];
export type WebhookDeliveryPage =
  operations['listWebhookDeliveries']['responses'][200]['content']['application/json'];
export type WebhookDeliveryQuery = NonNullable<operations['listWebhookDeliveries']['parameters']['query']>;

const segment = encodeURIComponent;
const BASE = 'v3/identity/webhook-endpoints';

/**
 * Webhook endpoints of an account (`playbook.webhookEndpoints`), with an access token of one of its
 * users. Creations, tests and retries are not sent twice after a failure of unknown outcome; reads,
 * changes and deletions are.
 *
 * @example
 * const endpoint = await playbook.webhookEndpoints.create({
 *   accountId: 'acme',
 *   url: 'https://ci.example.com/hooks/playbook',
 *   events: ['resource.version_published'],
 * });
 * // Keep endpoint.secret where the receiver reads it: it is never shown again.
 */
export function webhookEndpointsOf(transport: () => Transport) {
  const get = <T>(
    operation: string,
    path: string,
    query: Record<string, unknown> | undefined,
    options: CallOptions,
  ) =>
    transport().send<T>({
      operation,
      method: 'GET',
      path,
      query: query as never,
      idempotent: true,
      signal: options.signal,
    });
  const api = {
    create: (input: CreateWebhookEndpointInput, options: CallOptions = {}): Promise<CreatedWebhookEndpoint> =>
      transport().send({
        operation: 'createWebhookEndpoint',
        method: 'POST',
        path: BASE,
        body: input,
        idempotent: false,
        signal: options.signal,
      }),
    list: (query: WebhookEndpointQuery, options: CallOptions = {}): Promise<WebhookEndpointPage> =>
      get('listWebhookEndpoints', BASE, query, options),
    iterate: (
      query: WebhookEndpointQuery,
      options: CallOptions = {},
    ): AsyncGenerator<WebhookEndpoint, void, undefined> =>
      everyItem((page) => api.list({ ...query, page }, options), query.page),
    get: (endpointId: string, options: CallOptions = {}): Promise<WebhookEndpoint> =>
      get('getWebhookEndpoint', `${BASE}/${segment(endpointId)}`, undefined, options),
    /** Changes the fields given; `status: 'disabled'` stops deliveries, `'enabled'` starts them again. */
    update: (
      endpointId: string,
      input: UpdateWebhookEndpointInput,
      options: CallOptions = {},
    ): Promise<WebhookEndpoint> =>
      transport().send({
        operation: 'updateWebhookEndpoint',
        method: 'PATCH',
        path: `${BASE}/${segment(endpointId)}`,
        body: input,
        idempotent: true,
        signal: options.signal,
      }),
    delete: (endpointId: string, options: CallOptions = {}): Promise<void> =>
      transport().send({
        operation: 'deleteWebhookEndpoint',
        method: 'DELETE',
        path: `${BASE}/${segment(endpointId)}`,
        idempotent: true,
        signal: options.signal,
      }),
    /** One page of the endpoint's delivery attempts, newest first. */
    deliveries: (
      endpointId: string,
      query: WebhookDeliveryQuery = {},
      options: CallOptions = {},
    ): Promise<WebhookDeliveryPage> =>
      get('listWebhookDeliveries', `${BASE}/${segment(endpointId)}/deliveries`, query, options),
    iterateDeliveries: (
      endpointId: string,
      query: WebhookDeliveryQuery = {},
      options: CallOptions = {},
    ): AsyncGenerator<WebhookDeliveryAttempt, void, undefined> =>
      everyItem((page) => api.deliveries(endpointId, { ...query, page }, options), query.page),
    /** Makes a delivery due again at once, with the same `webhook-id`. */
    retryDelivery: (
      endpointId: string,
      deliveryId: string,
      options: CallOptions = {},
    ): Promise<WebhookDelivery> =>
      transport().send({
        operation: 'retryWebhookDelivery',
        method: 'POST',
        path: `${BASE}/${segment(endpointId)}/deliveries/${segment(deliveryId)}/retry`,
        idempotent: false,
        signal: options.signal,
      }),
    /** Sends a `webhook.test` event to the endpoint. */
    test: (endpointId: string, options: CallOptions = {}): Promise<WebhookDelivery> =>
      transport().send({
        operation: 'sendWebhookTestEvent',
        method: 'POST',
        path: `${BASE}/${segment(endpointId)}/test`,
        idempotent: false,
        signal: options.signal,
      }),
  };
  return api;
}
