import type { SwaggerOptions } from '@fastify/swagger';
import { REQUEST_ID_PATTERN } from '../schemas/common.js';
import { ACCOUNT_ID_PATTERN } from '../schemas/identity.js';

/**
 * The OpenAPI document (D17) as the service answers it, not only as its routes declare it. Routes
 * declare what differs between operations (parameters, bodies, answers, the statuses each can give);
 * this module adds what every answer has in common, in one place: problem documents as
 * `application/problem+json`; HTTP's own statuses every operation can give (405, 406, and 413 and 415
 * where a body is taken, D29); every header each answer carries, `required` where it always does; the
 * `x-account-id` selector; HEAD beside each GET; every body a named component; and integer formats.
 * `npm test` lints the result with Redocly and Spectral (test/docs/openapi.test.ts).
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
  '401':
    'No credential, or one that is malformed, unknown, expired, revoked or of the other environment; WWW-Authenticate names the credentials the operation takes',
  '403': 'The credential lacks the scope, account or plan the operation needs',
  '404': 'Not found, or not visible to the caller: the two are answered alike',
  '405':
    'Asked of this path with a method it does not take (this operation is not the one asked for); Allow lists the methods it takes',
  '406':
    'Accept rules out application/json and application/problem+json, the only media types the API answers in',
  '409':
    'The state of what the request names forbids it: `version_label_taken`, a label already names other content or pins; `key_inactive`, a revoked or expired key cannot be rolled; `key_already_rolled`, the key was rolled already (`replacedBy` names its successor); `endpoint_disabled`, a disabled webhook endpoint is sent nothing',
  '412':
    'If-Match does not name the current ETag of the object (a weak ETag never does), or If-None-Match does; the detail names the GET that reads it again',
  '413':
    'The body is larger than the operation takes, decided from Content-Length before it is read (or as a chunked body passes the limit); the connection is closed',
  '415':
    'The body is not JSON: the operation takes Content-Type: application/json, in UTF-8 and without a content coding',
  '410':
    '`sync_token_expired`: the sync position is older than the change log keeps, or was made for a view that has changed since (a plan); start again with an initial sync',
  '429': 'Too many requests for this credential, or too many failed authentications from this address',
  '500': 'The service could not complete the request; the request id finds it in the logs',
  '501': 'This deployment is not set up for the operation: leak reports need PLAYBOOK_LEAK_REPORT_KEYS_URL',
  '503': 'A backend of the service is unavailable, or the instance is stopping; retry after Retry-After',
};

const header = (description: string, schema: Json): Json => ({ description, schema });
const integer = (maximum: number): Json => ({ type: 'integer', format: 'int32', minimum: 0, maximum });

/** Response headers, once each, referred to by every answer that carries them. */
const HEADERS: Record<string, Json> = {
  RequestId: header(
    'The request id: echoed when the request sent a sane x-request-id, else made by the service',
    { type: 'string', maxLength: 128, pattern: REQUEST_ID_PATTERN },
  ),
  RateLimitLimit: header(
    'Requests the credential may make per window; on a refused credential, failures this address may make',
    integer(1_000_000_000),
  ),
  RateLimitRemaining: header('What is left of that budget in the current window', integer(1_000_000_000)),
  RateLimitReset: header('Seconds until the window ends', integer(86_400)),
  RetryAfter: header('Seconds to wait before retrying', integer(86_400)),
  ETag: header(
    "Strong validator of this representation, one per content encoding (the identity form's, and each encoding's derived from it); send it back in If-None-Match to revalidate, or in If-Match to write the object it names",
    { type: 'string', maxLength: 80, pattern: '^"[A-Za-z0-9_-]{1,70}"$' },
  ),
  CacheControl: header(
    '`private, no-cache` on reads: any cache revalidates first; `no-store` on writes, errors and answers with a secret',
    { type: 'string', enum: ['private, no-cache', 'no-store'] },
  ),
  Vary: header('The request headers that choose this representation', {
    type: 'string',
    const: 'x-api-key, authorization, x-account-id, accept-encoding',
  }),
  ContentEncoding: header(
    '`br` or `gzip` when Accept-Encoding asks for one and the answer is at least 1 KiB',
    { type: 'string', enum: ['br', 'gzip'] },
  ),
  Allow: header('The methods the path takes', {
    type: 'string',
    maxLength: 100,
    pattern: '^[A-Z]+(?:, [A-Z]+)*$',
  }),
  WwwAuthenticate: header(
    'One challenge per credential the operation takes (RFC 9110 §11.6.1), each in a field of its own: `ApiKey realm="playbook", header="x-api-key"` for an API key in the x-api-key header, `Bearer realm="playbook"` for a user access token (RFC 6750), and for leak reports `Signature realm="playbook-leak-reports", headers="github-public-key-identifier github-public-key-signature"`',
    {
      type: 'string',
      maxLength: 200,
      pattern: '^(?:ApiKey|Bearer|Signature) realm="[a-z-]+"(?:, [a-z]+="[a-z0-9 -]+")*$',
    },
  ),
};

/**
 * The header components: each of HEADERS as `required` (what an answer always carries), and as
 * `<name>Optional` for the answers that carry it only sometimes. A reference takes no `required`
 * beside it (OpenAPI 3.1 §4.8.23), so the component says it.
 */
const HEADER_COMPONENTS: Record<string, Json> = Object.fromEntries(
  Object.entries(HEADERS).flatMap(([name, definition]) => [
    [name, { ...definition, required: true }],
    [`${name}Optional`, definition],
  ]),
);

const ref = (name: string) => ({ $ref: `#/components/headers/${name}` });
/** A header every answer it is declared on carries. */
const always = (name: string) => ref(name);
/** A header some answers it is declared on carry, not all. */
const sometimes = (name: string) => ref(`${name}Optional`);

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
 * Where the operations are: relative to the document (OpenAPI 3.1 §4.8.5), that is on the deployment
 * it was read from, whatever host, port or proxy that was reached through. Nothing a request sends
 * (its Host header) is written into it.
 */
export const SERVER: Json = {
  url: '/',
  description:
    'This deployment, local, staging or production: paths resolve against the address this document was read from',
  'x-internal': false,
};

/** What of the deployment's configuration the document's security schemes describe. */
export interface SecuritySetup {
  /** Whether leak reports are taken (`PLAYBOOK_LEAK_REPORT_KEYS_URL`): their signature is a scheme. */
  readonly leakReports: boolean;
  /** Where access tokens' keys come from: a JWKS URL, or the embedded signer of `playbook token`. */
  readonly tokenKeys: 'jwks' | 'embedded';
}

/** Options of `@fastify/swagger`: the document's frame, and the pass that completes every operation. */
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
      servers: [SERVER],
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
  const schemas = { ...((document.components as Json | undefined)?.schemas as Json | undefined) };
  if (schemas.WebhookEvent !== undefined) document.webhooks = { change: { post: webhookOperation() } };
  const paths = (document.paths ?? {}) as Record<string, Record<string, Operation>>;
  for (const item of Object.values(paths)) {
    for (const [method, operation] of Object.entries(item)) {
      if (method !== 'head') completeOperation(method, operation, schemas);
    }
    // HEAD answers as GET does, with the same status and headers (a 304 included) and no body
    // (RFC 9110 §9.3.2): an operation of its own, made from its GET.
    if (item.head && item.get) item.head = headOf(item.get);
  }
  // The header components the answers refer to, and no others: an unused component is a lint.
  const used = new Set(
    [...JSON.stringify(paths).matchAll(/#\/components\/headers\/(\w+)/g)].map((m) => m[1]!),
  );
  const headers = Object.fromEntries(Object.entries(HEADER_COMPONENTS).filter(([name]) => used.has(name)));
  document.components = { ...(document.components as Json | undefined), headers, schemas };
  return withIntegerFormats(document) as Json;
}

const problemResponse = (status: string): Json & { content: Record<string, Json> } => ({
  description: STATUS_DESCRIPTIONS[status],
  content: { 'application/problem+json': { schema: { $ref: PROBLEM_REF } } },
});

/** Methods whose requests may carry a body, which may then be too large or not JSON (D29). */
const WITH_BODY = new Set(['put', 'post', 'patch', 'delete']);
/**
 * Operations that take no credential but count each request against the client's address (D10), as
 * failed credentials are: their answers carry that budget's headers.
 */
const COUNTED_BY_ADDRESS = new Set(['devSignIn']);

/** Statuses answered before the credential is counted against its budget, if it ever is. */
const UNCOUNTED = new Set(['400', '405', '500', '503']);
/** Statuses whose problem document says when to try again. */
const RETRY = new Set(['429', '503']);

function completeOperation(method: string, operation: Operation, schemas: Json): void {
  const secured = (operation.security?.length ?? 0) > 0;
  if (secured && operation.tags?.includes('playbook')) {
    operation.parameters = [...(operation.parameters ?? []), ACCOUNT_SELECTOR];
  }
  // HTTP's own statuses, which any operation may give whatever its route declares (D29).
  const own = ['405', '406', ...(WITH_BODY.has(method) ? ['413', '415'] : [])];
  for (const status of own) operation.responses[status] ??= problemResponse(status);
  operation.responses = Object.fromEntries(
    Object.entries(operation.responses).sort(([a], [b]) => a.localeCompare(b)),
  ) as Operation['responses'];
  const name = capitalised(operation.operationId ?? method);

  for (const [status, response] of Object.entries(operation.responses)) {
    const schema = response.content?.['application/json']?.schema as Json | undefined;
    if (schema?.$ref === PROBLEM_REF || Number(status) >= 400) {
      response.content = { 'application/problem+json': { schema: { $ref: PROBLEM_REF } } };
      response.description = STATUS_DESCRIPTIONS[status] ?? response.description;
    } else if (status === '304') {
      response.description = STATUS_DESCRIPTIONS[status]!;
    } else if (schema) {
      // A body's description is its answer's; its schema is a component of its own.
      if (schema.description === response.description) delete schema.description;
      response.content!['application/json']!.schema = named(schema, `${name}${status}`, schemas);
    }
    const counted = secured || COUNTED_BY_ADDRESS.has(operation.operationId ?? '');
    response.headers = { ...response.headers, ...headersOf(method, operation, status, counted) };
  }
}

/** The headers an answer of `status` to `operation` carries, required where it always does. */
function headersOf(
  method: string,
  operation: Operation,
  status: string,
  counted: boolean,
): Record<string, Json> {
  const headers: Record<string, Json> = { 'x-request-id': always('RequestId') };
  if (counted && status !== '405') {
    // Counted once the credential is known; refusals before that (a malformed request, an outage) are not.
    const declared = UNCOUNTED.has(status) ? sometimes : always;
    headers['RateLimit-Limit'] = declared('RateLimitLimit');
    headers['RateLimit-Remaining'] = declared('RateLimitRemaining');
    headers['RateLimit-Reset'] = declared('RateLimitReset');
  }
  const error = Number(status) >= 400;
  if (error) headers['Cache-Control'] = always('CacheControl');
  if (RETRY.has(status)) headers['Retry-After'] = always('RetryAfter');
  if (status === '401') headers['WWW-Authenticate'] = always('WwwAuthenticate');
  if (status === '405') headers.Allow = always('Allow');
  if (method === 'get' && (status === '200' || status === '304')) {
    headers.ETag = always('ETag');
    headers['Cache-Control'] = always('CacheControl');
    headers.Vary = always('Vary');
    if (status === '200') headers['Content-Encoding'] = sometimes('ContentEncoding');
  }
  if (!error && method !== 'get' && status !== '204') headers['Cache-Control'] = always('CacheControl');
  // A write answer carries the written object's ETag, to send back in If-Match (D23); a dry run
  // that creates nothing has none to carry.
  if (
    (method === 'put' || method === 'post') &&
    operation.tags?.includes('playbook') &&
    status.startsWith('2')
  ) {
    headers.ETag =
      operation.operationId === 'putCatalog' && status === '200' ? sometimes('ETag') : always('ETag');
  }
  return headers;
}

/** The HEAD operation of a GET: its parameters, its statuses and headers, no bodies. */
function headOf(get: Operation): Operation {
  const responses = Object.fromEntries(
    Object.entries(get.responses).map(([status, response]) => {
      const { content: _content, ...withoutBody } = response;
      return [status, withoutBody];
    }),
  );
  return {
    ...get,
    operationId: `head${capitalised(get.operationId ?? 'get')}`,
    summary: `Headers of: ${get.summary ?? 'the GET of this path'}`,
    description:
      'Answers as GET does, with the same status and headers (a 304 included), and no body (RFC 9110 §9.3.2): the ETag tells whether a held answer is current.',
    responses: responses as Operation['responses'],
  };
}

function capitalised(text: string): string {
  return text.charAt(0).toUpperCase() + text.slice(1);
}

/**
 * An answer's schema as a reference to a named component: every answer's body is one (D29). Its name
 * is its title where the schema has one (`PublishReport`, `CatalogPage`), else `fallback`; objects
 * within it that have a title of their own are named too. Two answers with the same schema share one.
 * Request bodies stay in their operations, titled.
 */
function named(schema: Json, fallback: string, schemas: Json): Json {
  if (typeof schema.$ref === 'string') return schema;
  const title = typeof schema.title === 'string' ? schema.title : fallback;
  const component = nameInner(schema, schemas);
  delete component.title;
  const held = schemas[title];
  if (held !== undefined && JSON.stringify(held) !== JSON.stringify(component)) {
    throw new Error(`two schemas are named ${title} in the OpenAPI document`);
  }
  schemas[title] = component;
  return { $ref: `#/components/schemas/${title}` };
}

/** `schema` with each titled object inside it (a page's items, an array's elements) made a component. */
function nameInner(schema: Json, schemas: Json): Json {
  const out: Json = {};
  for (const [key, value] of Object.entries(schema)) {
    if (key === 'properties' && value && typeof value === 'object') {
      out[key] = Object.fromEntries(
        Object.entries(value as Json).map(([field, child]) => [field, inner(child, schemas)]),
      );
    } else if (key === 'items') {
      out[key] = inner(value, schemas);
    } else {
      out[key] = value;
    }
  }
  return out;
}

function inner(value: unknown, schemas: Json): unknown {
  if (!value || typeof value !== 'object' || Array.isArray(value)) return value;
  const schema = value as Json;
  return typeof schema.title === 'string' ? named(schema, schema.title, schemas) : nameInner(schema, schemas);
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
