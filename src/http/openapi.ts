import type { SwaggerOptions } from '@fastify/swagger';
import { ACCOUNT_ID_PATTERN } from '../schemas/identity.js';

/**
 * The OpenAPI document (D17) as the service answers it, not only as its routes declare it. Routes
 * declare what differs between operations (parameters, bodies, answers, the statuses each can give);
 * this module adds what every answer has in common, in one place: problem documents as
 * `application/problem+json`, the headers every answer, every read and every rate-limited answer
 * carries, the `x-account-id` selector, and integer formats. HEAD is described with its GET: it is
 * the same operation without the body (RFC 9110 §9.3.2), not one a client calls for data.
 * `npm test` lints the result with Redocly and Spectral (test/http/openapi-lint.test.ts).
 */

type Json = Record<string, unknown>;
type Operation = Json & {
  operationId?: string;
  summary?: string;
  description?: string;
  tags?: string[];
  security?: Json[];
  parameters?: Json[];
  responses: Record<string, Json & { content?: Record<string, Json>; headers?: Record<string, Json> }>;
};

const PROBLEM_REF = '#/components/schemas/Problem';

/** Why each status is answered, for every operation that declares it. */
const STATUS_DESCRIPTIONS: Record<string, string> = {
  '304': 'Not modified: If-None-Match names the current validator of this representation; no body',
  '400':
    'Invalid request: each problem named in `errors` (at most 20), or `limit_reached` when a limit of the deployment is reached',
  '401': 'No credential, or one that is malformed, unknown, expired, revoked or of the other environment',
  '403': 'The credential lacks the scope, account or plan the operation needs',
  '404': 'Not found, or not visible to the caller: the two are answered alike',
  '409':
    'The state of what the request names forbids it: `key_inactive`, a revoked or expired key cannot be rolled; `endpoint_disabled`, a disabled webhook endpoint is sent nothing',
  '429': 'Too many requests for this credential, or too many failed authentications from this address',
  '500': 'The service could not complete the request; the request id finds it in the logs',
  '501': 'This deployment is not set up for the operation: leak reports need PLAYBOOK_LEAK_REPORT_KEYS_URL',
  '503': 'A backend of the service is unavailable; retry with backoff',
};

const header = (description: string, schema: Json): Json => ({ description, schema });
const integer = (maximum: number): Json => ({ type: 'integer', format: 'int32', minimum: 0, maximum });

/** Response headers, once each, referred to by every answer that carries them. */
const HEADERS: Record<string, Json> = {
  RequestId: header(
    'The request id: echoed when the request sent a sane x-request-id, else made by the service',
    {
      type: 'string',
      maxLength: 128,
      pattern: '^[A-Za-z0-9._:-]{1,128}$',
    },
  ),
  RateLimitLimit: header(
    'Requests the credential may make per window; on a refused credential, failures this address may make',
    integer(1_000_000_000),
  ),
  RateLimitRemaining: header('What is left of that budget in the current window', integer(1_000_000_000)),
  RateLimitReset: header('Seconds until the window ends', integer(86_400)),
  RetryAfter: header('Seconds to wait before retrying', integer(86_400)),
  ETag: header(
    'Strong validator of this representation, one per content encoding; send it back in If-None-Match',
    {
      type: 'string',
      maxLength: 80,
      pattern: '^"[^"]+"$',
    },
  ),
  CacheControl: header(
    '`private, no-cache` on reads: any cache revalidates first; `no-store` on answers with a secret',
    {
      type: 'string',
      enum: ['private, no-cache', 'no-store'],
    },
  ),
  Vary: header('The request headers that choose this representation', {
    type: 'string',
    const: 'x-api-key, authorization, x-account-id, accept-encoding',
  }),
  ContentEncoding: header(
    '`br` or `gzip` when Accept-Encoding asks for one and the answer is at least 1 KiB',
    {
      type: 'string',
      enum: ['br', 'gzip'],
    },
  ),
};

const ref = (name: string) => ({ $ref: `#/components/headers/${name}` });

/** The `x-account-id` request header of every read (D9). */
const ACCOUNT_SELECTOR: Json = {
  name: 'x-account-id',
  in: 'header',
  required: false,
  description:
    'The account to act for: one of the accounts an access token lists (403 otherwise); with an API key, its own account or nothing',
  schema: { type: 'string', minLength: 1, maxLength: 128, pattern: ACCOUNT_ID_PATTERN.source },
};

const TAGS = [
  {
    name: 'playbook',
    description: 'Reading Catalogs, Resources and Resource Versions, and the version history of a Resource',
  },
  {
    name: 'identity',
    description:
      'Creating, listing, revoking and rolling API keys with a user access token, and reports of leaked keys',
  },
  {
    name: 'webhooks',
    description:
      "An account's webhook endpoints, managed with a user access token: changes POSTed as they commit, signed per the Standard Webhooks specification (D28)",
  },
];

/**
 * Options of `@fastify/swagger`: the document's frame, and the pass that completes every operation.
 */
/** What of the deployment's configuration the document's security schemes describe. */
export interface SecuritySetup {
  /** Whether leak reports are taken (`PLAYBOOK_LEAK_REPORT_KEYS_URL`): their signature is a scheme. */
  readonly leakReports: boolean;
  /** Where access tokens' keys come from: a JWKS URL, or the embedded signer of `playbook token`. */
  readonly tokenKeys: 'jwks' | 'embedded';
}

export function openapiOptions(security: SecuritySetup): SwaggerOptions {
  // Typed loosely: the vendor extensions OWASP asks for (`x-internal`) are not in the OpenAPI types.
  const options: Json = {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'Playbook API',
        version: '3.0.0',
        description:
          'Catalogs of Resources with immutable versioned content, read with scoped secret API keys (x-api-key) or user access tokens. Every error is an RFC 9457 problem document; every answer carries x-request-id.',
        license: { name: 'Proprietary: all rights reserved', identifier: 'LicenseRef-Proprietary' },
        contact: { name: 'The operators of this deployment' },
      },
      servers: [
        {
          url: 'https://{host}',
          description: 'A production or staging deployment, behind the load balancer that terminates TLS',
          variables: {
            host: { default: 'playbook.example.com', description: 'host name (and port) of the deployment' },
          },
          'x-internal': false,
        },
      ],
      tags: TAGS,
      components: {
        securitySchemes: {
          apiKey: {
            type: 'apiKey',
            in: 'header',
            name: 'x-api-key',
            description:
              'A secret API key, svc_sk_<test|live>_<keyId>_<secret>, for server-side callers only',
          },
          accessToken: {
            type: 'http',
            scheme: 'bearer',
            bearerFormat: 'JWT',
            description: `A user access token, ${
              security.tokenKeys === 'jwks'
                ? 'signed by the identity provider whose keys this deployment reads from its JWKS URL'
                : "signed by this deployment's own key (`playbook token` mints one)"
            }, verified as RFC8725 recommends: signed with an allow-listed asymmetric algorithm (never none or HS*), exp required and at most PLAYBOOK_JWT_MAX_TTL_S away, iss and aud checked when configured`,
          },
          ...(security.leakReports
            ? {
                leakReportSignature: {
                  type: 'apiKey',
                  in: 'header',
                  name: 'Github-Public-Key-Signature',
                  description:
                    'A leak report is its own credential: an ECDSA P-256 signature of the raw body (base64 DER), by the key Github-Public-Key-Identifier names among those listed at PLAYBOOK_LEAK_REPORT_KEYS_URL',
                },
              }
            : {}),
        },
      },
    },
    refResolver: {
      buildLocalReference: (json: Json, _baseUri: unknown, _fragment: unknown, i: number) =>
        String(json.$id ?? `def-${i}`),
    },
    transformObject: (built: Json) => completeDocument(built.openapiObject as Json),
  };
  return options as SwaggerOptions;
}

/** The request a webhook endpoint receives (D28), as OpenAPI 3.1 describes what an API calls. */
const WEBHOOK_HEADERS: [name: string, description: string, schema: Json][] = [
  [
    'webhook-id',
    'The event id: the same on every attempt of a delivery, so that a receiver drops what it has seen',
    { type: 'string', maxLength: 36, pattern: '^[0-9a-f-]{36}$' },
  ],
  [
    'webhook-timestamp',
    'When the attempt was made, in seconds since the epoch: refuse one far from your clock (5 minutes)',
    { type: 'string', maxLength: 12, pattern: '^[0-9]{1,12}$' },
  ],
  [
    'webhook-signature',
    'v1, and the base64 HMAC-SHA256 of "<webhook-id>.<webhook-timestamp>.<body>" under the key bytes of the endpoint secret (base64 after whsec_); several signatures are separated by spaces',
    { type: 'string', maxLength: 1000, pattern: '^v1,[A-Za-z0-9+/=]+( v1,[A-Za-z0-9+/=]+)*$' },
  ],
];

function webhookOperation(): Json {
  return {
    operationId: 'receiveWebhookEvent',
    summary:
      'An event POSTed to a webhook endpoint: a change of the account, or of the service Catalogs and Resources',
    description:
      'Signed as the Standard Webhooks specification says. Answer with any 2xx within 10 seconds; anything else (a redirect too) is tried again after about 5 s, 5 min, 30 min, 2 h, 5 h, 10 h and 10 h, then given up.',
    tags: ['webhooks'],
    security: [],
    parameters: WEBHOOK_HEADERS.map(([name, description, schema]) => ({
      name,
      in: 'header',
      required: true,
      description,
      schema,
    })),
    requestBody: {
      required: true,
      content: { 'application/json': { schema: { $ref: '#/components/schemas/WebhookEvent' } } },
    },
    responses: {
      '200': { description: 'Received (any 2xx): the delivery is done' },
      '400': { description: 'Refused (the signature did not verify, say): tried again later' },
    },
  };
}

/** Completes the document `@fastify/swagger` built from the routes. */
export function completeDocument(document: Json): Json {
  document.components = { ...(document.components as Json | undefined), headers: HEADERS };
  const schemas = (document.components as { schemas?: Json }).schemas;
  if (schemas?.WebhookEvent !== undefined) document.webhooks = { change: { post: webhookOperation() } };
  const paths = (document.paths ?? {}) as Record<string, Record<string, Operation>>;
  for (const item of Object.values(paths)) {
    if (item.head && item.get) {
      delete item.head;
      item.get.description =
        `${item.get.description ?? ''} HEAD answers as GET does, with the same status and headers (a 304 included) and no body.`.trim();
    }
    for (const [method, operation] of Object.entries(item)) completeOperation(method, operation);
  }
  return withIntegerFormats(document) as Json;
}

function completeOperation(method: string, operation: Operation): void {
  const secured = (operation.security?.length ?? 0) > 0;
  if (secured && operation.tags?.includes('playbook')) {
    operation.parameters = [...(operation.parameters ?? []), ACCOUNT_SELECTOR];
  }
  for (const [status, response] of Object.entries(operation.responses)) {
    const schema = response.content?.['application/json']?.schema as Json | undefined;
    if (schema?.$ref === PROBLEM_REF) {
      response.content = { 'application/problem+json': { schema: { $ref: PROBLEM_REF } } };
      response.description = STATUS_DESCRIPTIONS[status] ?? response.description;
    } else if (status === '304') {
      response.description = STATUS_DESCRIPTIONS[status]!;
    }
    const headers: Record<string, Json> = { 'x-request-id': ref('RequestId') };
    if (secured) {
      headers['RateLimit-Limit'] = ref('RateLimitLimit');
      headers['RateLimit-Remaining'] = ref('RateLimitRemaining');
      headers['RateLimit-Reset'] = ref('RateLimitReset');
    }
    if (status === '429') headers['Retry-After'] = ref('RetryAfter');
    if (method === 'get' && (status === '200' || status === '304')) {
      headers.ETag = ref('ETag');
      headers['Cache-Control'] = ref('CacheControl');
      headers.Vary = ref('Vary');
    }
    if (method === 'get' && status === '200') headers['Content-Encoding'] = ref('ContentEncoding');
    if (status === '201') headers['Cache-Control'] = ref('CacheControl');
    // A write answer carries the written object's ETag, to send back in If-Match (D23).
    if (
      (method === 'put' || method === 'post') &&
      operation.tags?.includes('playbook') &&
      status.startsWith('2')
    ) {
      headers.ETag = ref('ETag');
      headers['Cache-Control'] = ref('CacheControl');
    }
    response.headers = { ...response.headers, ...headers };
  }
}

/**
 * Every integer schema says its width: int32 when its maximum fits in 32 bits, int64 otherwise (the
 * counters and page numbers of contract.md §8 reach 2^53 - 1).
 */
function withIntegerFormats(value: unknown): unknown {
  if (Array.isArray(value)) {
    for (const item of value) withIntegerFormats(item);
  } else if (value !== null && typeof value === 'object') {
    const schema = value as Json;
    if (schema.type === 'integer' && schema.format === undefined) {
      const maximum = typeof schema.maximum === 'number' ? schema.maximum : Number.POSITIVE_INFINITY;
      schema.format = maximum <= 2 ** 31 - 1 ? 'int32' : 'int64';
    }
    for (const child of Object.values(schema)) withIntegerFormats(child);
  }
  return value;
}
