export { type Environment, type ParsedApiKey, parseApiKey } from './api-key.js';
export * from './client.js';
export { PlaybookError, type PlaybookErrorInit, type ProblemField } from './errors.js';
export type { components, operations, paths } from './openapi.js';
export { isLoopbackUrl } from './origins.js';
export * from './sync.js';
export { type CachedAnswer, MemoryCache, type PlaybookCache, type ResponseInfo } from './transport.js';
export type {
  CreatedWebhookEndpoint,
  CreateWebhookEndpointInput,
  UpdateWebhookEndpointInput,
  WebhookDelivery,
  WebhookDeliveryAttempt,
  WebhookDeliveryPage,
  WebhookDeliveryQuery,
  WebhookEndpoint,
  WebhookEndpointPage,
  WebhookEndpointQuery,
} from './webhook-endpoints.js';
export {
  type VerifyWebhookOptions,
  verifyWebhook,
  type WebhookEvent,
  type WebhookHeaders,
  WebhookVerificationError,
} from './webhooks.js';
