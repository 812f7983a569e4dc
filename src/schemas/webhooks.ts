import { type Static, Type } from '@sinclair/typebox';
import { AUDIT_ACTOR_TYPES, CHANGE_TYPES } from './audit.js';
import {
  Counter,
  DateTime,
  Description,
  Page,
  PageQuery,
  REQUEST_ID_PATTERN,
  StringEnum,
  Uuid,
} from './common.js';
import { AccountId } from './identity.js';

/**
 * Webhooks (D28): an account's endpoints, the events each takes, and what was delivered to them. The
 * events are the change log's changes (D26), signed and sent as the Standard Webhooks specification
 * says.
 */

/** The most endpoints one account may hold. */
export const MAX_WEBHOOK_ENDPOINTS = 20;

/** Subscribes an endpoint to every change type, those added later included. */
export const EVERY_EVENT = '*';

/** The event `POST …/{endpointId}/test` sends: no change, only a check that the endpoint answers. */
export const TEST_EVENT = 'webhook.test';

export const WEBHOOK_ENDPOINT_STATUSES = ['enabled', 'disabled'] as const;
export type WebhookEndpointStatus = (typeof WEBHOOK_ENDPOINT_STATUSES)[number];

export const WEBHOOK_DELIVERY_STATUSES = ['pending', 'succeeded', 'failed'] as const;
export type WebhookDeliveryStatus = (typeof WEBHOOK_DELIVERY_STATUSES)[number];

export const WEBHOOK_ATTEMPT_OUTCOMES = ['succeeded', 'failed'] as const;

/**
 * Why an attempt failed, in one word: the answer was not a 2xx (`status`), was a redirect, did not
 * come in time, the connection failed (`network`) or the address was refused (`address`); or the
 * delivery was given up unsent because its endpoint had more pending than the deployment allows
 * (`backlog_exceeded`).
 */
export const WEBHOOK_FAILURE_REASONS = [
  'status',
  'redirect',
  'timeout',
  'network',
  'address',
  'backlog_exceeded',
] as const;
export type WebhookFailureReason = (typeof WEBHOOK_FAILURE_REASONS)[number];

/** The longest URL an endpoint may have. */
export const MAX_WEBHOOK_URL_LENGTH = 2048;

const WebhookUrl = Type.String({
  minLength: 1,
  maxLength: MAX_WEBHOOK_URL_LENGTH,
  format: 'uri',
  description:
    'where events are POSTed: an https URL (http only where the deployment allows it for development), without user or password, whose host is a public address',
});

const SubscribedType = StringEnum([...CHANGE_TYPES, EVERY_EVENT] as const, {
  description: 'a change type, or * for every type (those added later included)',
});

const WebhookEvents = Type.Array(SubscribedType, {
  minItems: 1,
  maxItems: CHANGE_TYPES.length,
  uniqueItems: true,
  description: 'the change types sent to the endpoint, distinct; or ["*"] for all of them',
});

/** What a delivery carries: a change type, or the test event. */
export const DeliveredType = StringEnum([...CHANGE_TYPES, TEST_EVENT] as const, {
  description: 'the type of the event delivered: a change type, or webhook.test',
});

const WebhookEndpointStatusSchema = StringEnum(WEBHOOK_ENDPOINT_STATUSES, {
  description:
    'enabled: events are delivered; disabled: nothing is sent (set by a user, or by the service after five days of failed deliveries)',
});

const endpointFields = {
  id: Uuid,
  accountId: AccountId,
  url: WebhookUrl,
  events: WebhookEvents,
  description: Type.Optional(Description),
  status: WebhookEndpointStatusSchema,
  createdAt: DateTime,
  updatedAt: DateTime,
};

/** An endpoint as listed: never its secret. */
export const WebhookEndpoint = Type.Object(endpointFields, { $id: 'WebhookEndpoint' });
export type WebhookEndpoint = Static<typeof WebhookEndpoint>;

/** Standard Webhooks' secret form: `whsec_` and the base64 of 24 to 64 random bytes. */
export const WEBHOOK_SECRET_PATTERN = '^whsec_[A-Za-z0-9+/]{32,88}={0,2}$';

/** The answer of a creation: the only time the signing secret is shown. */
export const CreatedWebhookEndpoint = Type.Object(
  {
    ...endpointFields,
    secret: Type.String({
      maxLength: 100,
      pattern: WEBHOOK_SECRET_PATTERN,
      description:
        'the signing secret (whsec_ and base64 of 32 random bytes): every delivery is signed with it; shown once and never again',
    }),
  },
  { $id: 'CreatedWebhookEndpoint' },
);
export type CreatedWebhookEndpoint = Static<typeof CreatedWebhookEndpoint>;

export const CreateWebhookEndpointBody = Type.Object(
  {
    accountId: AccountId,
    url: WebhookUrl,
    events: WebhookEvents,
    description: Type.Optional(Description),
  },
  { additionalProperties: false },
);
export type CreateWebhookEndpointBody = Static<typeof CreateWebhookEndpointBody>;

export const UpdateWebhookEndpointBody = Type.Object(
  {
    url: Type.Optional(WebhookUrl),
    events: Type.Optional(WebhookEvents),
    description: Type.Optional(
      Type.Union([Description, Type.Null()], { description: 'the new description; null removes it' }),
    ),
    status: Type.Optional(WebhookEndpointStatusSchema),
  },
  { additionalProperties: false, minProperties: 1 },
);
export type UpdateWebhookEndpointBody = Static<typeof UpdateWebhookEndpointBody>;

export const WebhookEndpointPage = Page(Type.Ref(WebhookEndpoint), {
  description: "One page of an account's webhook endpoints, oldest first",
});
export type WebhookEndpointPage = Static<typeof WebhookEndpointPage>;

export const ListWebhookEndpointsQuery = Type.Object(
  { accountId: AccountId, ...PageQuery },
  { additionalProperties: false },
);

export const WebhookEndpointParams = Type.Object({ endpointId: Uuid });
export const WebhookDeliveryParams = Type.Object({ endpointId: Uuid, deliveryId: Uuid });
export const ListWebhookDeliveriesQuery = Type.Object({ ...PageQuery }, { additionalProperties: false });

const AttemptError = Type.String({
  maxLength: 300,
  description:
    'why the attempt failed, when no 2xx came: a timeout, a refused or private address, a redirect, a lost connection, or a backlog past its bound (not sent)',
});

/** A delivery: one event due to one endpoint, until it succeeds or its retries run out. */
export const WebhookDelivery = Type.Object(
  {
    id: Uuid,
    endpointId: Uuid,
    eventId: Type.String({
      maxLength: 36,
      pattern: '^[0-9a-f-]{36}$',
      description: 'the event, sent as webhook-id on every attempt: a receiver drops what it has seen',
    }),
    type: DeliveredType,
    status: StringEnum(WEBHOOK_DELIVERY_STATUSES, {
      description:
        'pending: not yet delivered, an attempt is due; succeeded: a 2xx came; failed: every retry failed, or it was given up unsent when its endpoint had too many deliveries pending (its last attempt listed has the reason backlog_exceeded); a failed delivery can be sent again',
    }),
    attempts: Counter,
    nextAttemptAt: Type.Optional({ ...DateTime, description: 'when it is tried next, while pending' }),
    createdAt: DateTime,
  },
  { $id: 'WebhookDelivery' },
);
export type WebhookDelivery = Static<typeof WebhookDelivery>;

/** One attempt to deliver an event, as the deliveries list shows it. */
export const WebhookDeliveryAttempt = Type.Object(
  {
    id: Uuid,
    deliveryId: Uuid,
    eventId: WebhookDelivery.properties.eventId,
    type: DeliveredType,
    attempt: Type.Integer({
      minimum: 1,
      maximum: 1000,
      description: 'which attempt of the delivery, from 1 (one given up unsent, backlog_exceeded, counts)',
    }),
    at: DateTime,
    outcome: StringEnum(WEBHOOK_ATTEMPT_OUTCOMES),
    statusCode: Type.Optional(
      Type.Integer({ minimum: 100, maximum: 599, description: 'the status the endpoint answered' }),
    ),
    durationMs: Type.Integer({ minimum: 0, maximum: 600_000, description: 'how long the attempt took' }),
    error: Type.Optional(AttemptError),
    reason: Type.Optional(
      StringEnum(WEBHOOK_FAILURE_REASONS, {
        description:
          'why the attempt failed, in one word: status (not a 2xx), redirect, timeout, network, address (a refused or private address), or backlog_exceeded (not sent: more deliveries were pending to the endpoint than the deployment allows, and this was among the oldest; retry it to send it)',
      }),
    ),
    nextAttemptAt: Type.Optional({
      ...DateTime,
      description: 'when the delivery is tried again after this failure; absent when it is not',
    }),
  },
  { $id: 'WebhookDeliveryAttempt' },
);
export type WebhookDeliveryAttempt = Static<typeof WebhookDeliveryAttempt>;

export const WebhookDeliveryAttemptPage = Page(Type.Ref(WebhookDeliveryAttempt), {
  description: "One page of an endpoint's delivery attempts, newest first",
});
export type WebhookDeliveryAttemptPage = Static<typeof WebhookDeliveryAttemptPage>;

/** What an event's `data` holds: the change it tells of. */
export const WebhookEventData = Type.Object({
  id: { ...Uuid, description: 'the event id (the change id; webhook-id)' },
  seq: Type.Optional({ ...Counter, description: 'the change position in the log' }),
  accountId: Type.Optional({ ...AccountId, description: 'the account whose change it is; absent for svc' }),
  owner: StringEnum(['svc', 'account'] as const, {
    description: "svc: the service's own Catalogs and Resources; account: the account's own",
  }),
  target: Type.Object({
    kind: StringEnum(['catalog', 'resource', 'api_key', 'account', 'webhook_endpoint'] as const),
    id: Type.String({
      maxLength: 260,
      pattern: '^[A-Za-z0-9][A-Za-z0-9._:/-]*$',
      description: 'the id of what changed: a uuid, a key id or an account id',
    }),
    humanRef: Type.Optional(
      Type.String({
        maxLength: 260,
        pattern: '^(?:svc|org)/[a-z0-9]+(?:-[a-z0-9]+)*(?:/[a-z0-9]+(?:-[a-z0-9]+)*)?$',
        description: 'a Catalog or a Resource: its human ref',
      }),
    ),
  }),
  summary: Type.Optional(Type.String({ maxLength: 1000, description: 'what changed, in one line' })),
  actor: Type.Optional(
    Type.Object({
      type: StringEnum(AUDIT_ACTOR_TYPES),
      id: Type.Optional(Type.String({ maxLength: 2048 })),
    }),
  ),
  requestId: Type.Optional(Type.String({ maxLength: 128, pattern: REQUEST_ID_PATTERN })),
});

/** The body every delivery POSTs (Standard Webhooks' `{ type, timestamp, data }`). */
export const WebhookEvent = Type.Object(
  {
    type: DeliveredType,
    timestamp: {
      ...DateTime,
      description: 'when the change committed (the test event: when it was asked for)',
    },
    data: WebhookEventData,
  },
  { $id: 'WebhookEvent' },
);
export type WebhookEvent = Static<typeof WebhookEvent>;

/** Every named schema of this area, registered once with Fastify (answers and the OpenAPI document). */
export const webhookSchemas = [
  WebhookEndpoint,
  CreatedWebhookEndpoint,
  WebhookDelivery,
  WebhookDeliveryAttempt,
  WebhookEvent,
];
