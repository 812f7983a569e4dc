import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import AjvCompiler, { type Options as AjvOptions } from '@fastify/ajv-compiler';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import Fastify, {
  type FastifyBaseLogger,
  type FastifyInstance,
  type FastifyServerOptions,
  LogController,
} from 'fastify';
import FindMyWay, { type HTTPMethod } from 'find-my-way';
import type { AuditLog } from '../audit/audit-log.js';
import type { ApiKeyService } from '../auth/api-key-service.js';
import { type Authenticator, authHook } from '../auth/authenticator.js';
import type { LeakReportSignatures } from '../auth/leak-reports.js';
import type { AccessLimiter } from '../auth/rate-limits.js';
import type { PlaybookService } from '../catalog/playbook-service.js';
import { InputError, MethodNotAllowedError, NotFoundError, UnavailableError } from '../foundation/errors.js';
import {
  CREDENTIAL_PARAMETERS,
  holdsCredential,
  redactCredentials,
  redactUrl,
} from '../foundation/redact-url.js';
import { CREDENTIAL_SAFE_SERIALIZERS, installAccessLog } from '../http/access-log.js';
import { clientErrorHandler, closeAfterAnswer } from '../http/connection-close.js';
import { jsonBodyParser } from '../http/json-body.js';
import { openapiOptions } from '../http/openapi.js';
import { answerUnmetExpectation, handleClientError, handleError, writeRawProblem } from '../http/problem.js';
import { queryHooks } from '../http/query.js';
import { lazyRequestLogger } from '../http/request-logger.js';
import { isCheckedInSlices } from '../http/sliced-body.js';
import { type Tracing, traceRequests } from '../observability/tracing.js';
import type { PublishService } from '../publish/publish-service.js';
import { identityRoutes } from '../routes/identity.js';
import { operationsRoutes, type ReadinessCheck } from '../routes/operations.js';
import { playbookRoutes } from '../routes/playbook.js';
import { publishRoutes } from '../routes/publish.js';
import { Problem, REQUEST_ID_PATTERN } from '../schemas/common.js';
import { playbookSchemas } from '../schemas/playbook.js';

export interface AppDependencies {
  readonly playbook: PlaybookService;
  readonly authenticator: Authenticator;
  /** Rate limits (D10), always given: a caller that wants none says so with a limiter that counts nothing. */
  readonly rateLimits: AccessLimiter;
  /** Key management (D8, D22) at `/v3/identity/api-keys`; an app built without it has no identity routes. */
  readonly keys?: ApiKeyService;
  /** D23: the audit trail, listed at `/v3/identity/audit-events` beside key management. */
  readonly audit?: AuditLog;
  /**
   * D23: publishing, with the largest body a write may have and the most Resources a Catalog's body
   * may hold (D20); an app built without it takes no writes.
   */
  readonly publish?: {
    readonly service: PublishService;
    readonly maxBodyBytes: number;
    readonly maxResources: number;
  };
  /** D22: verifies leak reports' signatures; without it, leak reports answer 501. */
  readonly leakSignatures?: LeakReportSignatures;
  readonly readiness: readonly ReadinessCheck[];
  /** A pino logger, or Fastify logger options; tests pass `false`. */
  readonly logger?: FastifyServerOptions['logger'] | FastifyBaseLogger;
  /** Which proxies' `X-Forwarded-For` to believe for the client address (`PLAYBOOK_TRUST_PROXY`). */
  readonly trustProxy?: boolean | number | string[];
  /** D20: how long a request may take to arrive, and an idle keep-alive connection may stay open. */
  readonly timeouts?: { readonly requestMs: number; readonly keepAliveMs: number };
  /** D25: a span per request, when OpenTelemetry tracing is on. */
  readonly tracing?: Tracing;
}

/** D20's defaults, as the configuration has them. */
const DEFAULT_TIMEOUTS = { requestMs: 30_000, keepAliveMs: 72_000 };

const SANE_REQUEST_ID = new RegExp(REQUEST_ID_PATTERN);

/**
 * Echo a caller's request id when it is sane; otherwise make one (D2). A credential sent as one would
 * be echoed in the answer and written in every log line of the request (D21).
 */
function requestIdOf(request: IncomingMessage): string {
  const sent = request.headers['x-request-id'];
  return typeof sent === 'string' && SANE_REQUEST_ID.test(sent) && !holdsCredential(sent)
    ? sent
    : randomUUID();
}

/** How many segments of an unknown path a 404 names: enough to tell which family of routes was meant. */
const NAMED_SEGMENTS = 3;
const MAX_NAMED_SEGMENT = 64;

/**
 * The start of a path no route takes, as a 404 names it (D21): its first segments, each redacted when
 * credential-shaped and cut when long; never the whole path, which may carry anything further on.
 */
function routeStart(path: string): string {
  const segments = path.split('/', NAMED_SEGMENTS + 2);
  const named = segments.slice(1, NAMED_SEGMENTS + 1).map((segment) => {
    const shown = redactCredentials(segment);
    return shown.length > MAX_NAMED_SEGMENT ? `${shown.slice(0, MAX_NAMED_SEGMENT - 1)}…` : shown;
  });
  return `/${named.join('/')}${segments.length > NAMED_SEGMENTS + 1 ? '/…' : ''}`;
}

/** Whatever logger the app is given writes requests and errors with no credential in them (D21). */
function credentialSafe(
  logger: FastifyServerOptions['logger'] | FastifyBaseLogger,
): { loggerInstance: FastifyBaseLogger } | { logger: FastifyServerOptions['logger'] } {
  if (typeof logger === 'object' && logger !== null && 'child' in logger) {
    return { loggerInstance: logger.child({}, { serializers: CREDENTIAL_SAFE_SERIALIZERS }) };
  }
  if (logger === false || logger === undefined) return { logger: false };
  const options = logger === true ? {} : logger;
  return { logger: { ...options, serializers: { ...options.serializers, ...CREDENTIAL_SAFE_SERIALIZERS } } };
}

/**
 * A credential sent in the URL (D21) is refused: URLs end up in logs, histories and proxies. The value
 * is never logged either (see `redactUrl`).
 */
function credentialInQuery(query: unknown): InputError | undefined {
  if (typeof query !== 'object' || query === null) return undefined;
  for (const name of Object.keys(query)) {
    if (CREDENTIAL_PARAMETERS.has(name.toLowerCase())) {
      return InputError.of(
        'query',
        name,
        'send credentials in headers (x-api-key or Authorization), never in the URL',
      );
    }
  }
  return undefined;
}

/** A route option's hooks as a list: Fastify takes one, a list, or none. */
function hooksOf<H>(hooks: H | H[] | undefined): H[] {
  return hooks === undefined ? [] : ([hooks].flat() as H[]);
}

/** RFC 9112 §3.2: an HTTP/1.1 request without Host is a 400. */
function missingHost(request: IncomingMessage): InputError | undefined {
  if (request.headers.host !== undefined || request.httpVersion === '1.0') return undefined;
  return InputError.of('header', 'host', 'is required in HTTP/1.1');
}

const validators = AjvCompiler();

/**
 * One Ajv per HTTP part (Fastify's schema controller): query strings, paths and headers arrive as
 * text and are coerced to their schema's types; a JSON body carries its own types, so it is checked
 * as it is, and `"name": 7` is refused rather than made to look right.
 */
function validatorPerPart(
  externalSchemas: Parameters<ReturnType<typeof AjvCompiler>>[0],
  options: { customOptions?: AjvOptions } = {},
) {
  const coercing = validators(externalSchemas, options);
  const exact = validators(externalSchemas, {
    ...options,
    customOptions: { ...options.customOptions, coerceTypes: false },
  });
  return (route: { httpPart?: string } & Parameters<typeof coercing>[0]) => {
    // A body with a list of thousands is checked by its route, in slices (D20).
    if (route.httpPart === 'body' && isCheckedInSlices((route as { schema?: unknown }).schema)) {
      return (() => true) as unknown as ReturnType<typeof exact>;
    }
    return route.httpPart === 'body' ? exact(route) : coercing(route);
  };
}

function withoutUpgradeInsecureRequests(policy: string): string {
  return policy
    .split(';')
    .map((directive) => directive.trim())
    .filter((directive) => directive !== '' && directive !== 'upgrade-insecure-requests')
    .join('; ');
}

/** A hop count trusts that many proxies nearest the service; addresses and booleans pass as they are. */
function trustProxyOption(setting: boolean | number | string[]): FastifyServerOptions['trustProxy'] {
  return typeof setting === 'number' ? (_address: string, hop: number) => hop < setting : setting;
}

/**
 * Builds the HTTP application from explicit dependencies. Starts nothing: `server.ts` and the tests
 * compose the dependencies and decide whether to listen.
 */
export async function buildApp(deps: AppDependencies): Promise<FastifyInstance> {
  const loggerOption = deps.logger ?? false;
  const timeouts = deps.timeouts ?? DEFAULT_TIMEOUTS;
  const app = Fastify({
    ...credentialSafe(loggerOption),
    genReqId: requestIdOf,
    // One access line per request instead of Fastify's two (D25): see http/access-log.ts.
    logController: new LogController({ disableRequestLogging: true }),
    // Without a logger, Fastify hands every request the null logger itself, and nothing is to be saved.
    ...(loggerOption === false ? {} : { childLoggerFactory: lazyRequestLogger }),
    bodyLimit: 64 * 1024,
    // Requests that arrive while the server drains are refused by the hook below with a problem
    // document, rather than Fastify's bare 503.
    return503OnClosing: false,
    trustProxy: trustProxyOption(deps.trustProxy ?? false),
    // Path values up to this length reach schema validation, which names the bad one (D4); the
    // router's default of 100 would turn a 121-character slug into a bare 414.
    routerOptions: { maxParamLength: 2048 },
    // Errors the router raises before any hook (a bad URL, a path value past the limit above) are
    // answered by the same problem handler as every other error (D2), and so are those of Node's HTTP
    // parser, before any request exists (a malformed request line, headers over the limit, D20's 408).
    frameworkErrors: handleError,
    clientErrorHandler: clientErrorHandler(handleClientError, timeouts.requestMs),
    // D20: a request whose headers or body arrive slower than this is answered 408 and closed, and a
    // connection that sends nothing in that time is closed unanswered (http/connection-close.ts); Node
    // checks every second rather than every 30.
    requestTimeout: timeouts.requestMs,
    keepAliveTimeout: timeouts.keepAliveMs,
    http: {
      // A missing Host is refused below with a problem document, rather than by Node with a bare 400.
      requireHostHeader: false,
      headersTimeout: timeouts.requestMs,
      connectionsCheckingInterval: Math.min(1000, timeouts.requestMs),
    },
    ajv: {
      customOptions: {
        // Unknown parameters and fields are errors to report, not properties to drop silently (D3).
        removeAdditional: false,
        allErrors: true,
        coerceTypes: 'array',
        useDefaults: true,
      },
    },
    schemaController: { compilersFactory: { buildValidator: validatorPerPart } },
  }).withTypeProvider<TypeBoxTypeProvider>();

  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, jsonBodyParser);

  // First of the hooks, so that everything a request does happens inside its span.
  if (deps.tracing) await traceRequests(app, deps.tracing);
  app.decorateRequest('principal', null);
  installAccessLog(app);
  app.setErrorHandler(handleError);
  // D2: a known path asked with another method is a 405 that names the methods it takes.
  const routes = FindMyWay({ maxParamLength: 2048 });
  const methods = new Set<string>();
  app.addHook('onRoute', (route) => {
    for (const method of [route.method].flat()) {
      methods.add(method);
      routes.on(method as HTTPMethod, route.url, () => {});
    }
  });
  // Each route's own steps are bound to it once, when it is added, rather than looked up on every
  // request: the name the access line and the metrics give it, its credential and scope (D7, D10),
  // and the query checks of D3 where it takes a query.
  app.addHook('onRoute', (route) => {
    route.config = { ...route.config, operation: route.schema?.operationId ?? route.url };
    const needs = route.config.auth;
    if (needs)
      route.onRequest = [...hooksOf(route.onRequest), authHook(deps.authenticator, deps.rateLimits, needs)];
    const query = queryHooks(route.schema?.querystring);
    if (query) {
      route.preValidation = [...hooksOf(route.preValidation), query.preValidation];
      route.preHandler = [...hooksOf(route.preHandler), query.preHandler];
    }
  });
  app.setNotFoundHandler((request) => {
    const path = request.url.split('?')[0]!;
    const allowed = [...methods].filter((method) => routes.find(method as HTTPMethod, path) !== null);
    if (allowed.length > 0) throw new MethodNotAllowedError(request.method, allowed);
    throw new NotFoundError(`no operation at ${request.method} ${routeStart(path)}`);
  });
  // A CONNECT never reaches a route: Node hands it over as a tunnel request, which this is not.
  app.server.on('connect', (_request: IncomingMessage, socket: Duplex) => {
    writeRawProblem(socket, 501, 'not_implemented', 'CONNECT is not supported: the service is no proxy.');
    closeAfterAnswer(socket, timeouts.requestMs);
  });
  app.server.on('checkExpectation', answerUnmetExpectation);

  let draining = false;
  app.addHook('preClose', async () => {
    draining = true;
  });
  // Hooks that need not wait for anything take a callback: Fastify runs them without a promise.
  app.addHook('onRequest', (request, reply, done) => {
    reply.header('x-request-id', request.id);
    if (draining) done(new UnavailableError('the service is shutting down; retry with backoff'));
    else done(missingHost(request.raw) ?? credentialInQuery(request.query));
  });
  // While draining, every answer closes its connection: an idle keep-alive socket would otherwise
  // hold the server open until its timeout.
  app.addHook('onSend', (_request, reply, payload, done) => {
    if (draining) reply.header('connection', 'close');
    // A redirect may repeat the request's URL (the docs' pages do), credential included (D21).
    if (reply.statusCode >= 300 && reply.statusCode < 400) {
      const location = reply.getHeader('location');
      if (typeof location === 'string') reply.header('location', redactUrl(location));
    }
    done(null, payload);
  });
  app.decorateRequest('queryProblems', null);

  app.addSchema(Problem);
  for (const schema of playbookSchemas) app.addSchema(schema);

  await app.register(swagger, openapiOptions());
  await app.register(swaggerUi, {
    routePrefix: '/docs',
    staticCSP: true,
    // The service is often opened over plain HTTP (a VM, a container): a policy that upgrades its own
    // assets to https would leave the page blank there. TLS is the load balancer's to enforce.
    transformStaticCSP: (header) => withoutUpgradeInsecureRequests(String(header)),
    // "Try it out" calls the service the page came from, over the scheme it came with.
    transformSpecification: (document, request) => ({
      ...document,
      servers: [
        {
          // The Host header is the caller's to write; a credential in it is not shown back (D21).
          url: `${request.protocol}://${redactCredentials(request.host)}`,
          description: 'This deployment, as the page was opened (local, staging or production)',
          'x-internal': false,
        },
      ],
    }),
  });

  // Someone who opens the service in a browser finds where to go, rather than a bare 404.
  app.get('/', { schema: { hide: true } }, async (_request, reply) => {
    reply.header('cache-control', 'public, max-age=300');
    return {
      name: 'Playbook API',
      documentation: '/docs',
      openapi: '/v3/openapi.json',
      health: '/healthz',
      readiness: '/readyz',
    };
  });

  app.get('/v3/openapi.json', { schema: { hide: true } }, async (_request, reply) => {
    reply.header('cache-control', 'public, max-age=300');
    return app.swagger();
  });

  await app.register(operationsRoutes(deps.readiness));
  await app.register(playbookRoutes(deps.playbook));
  if (deps.publish) await app.register(publishRoutes(deps.publish));
  if (deps.keys) {
    const options = {
      limiter: deps.rateLimits,
      ...(deps.leakSignatures ? { leakSignatures: deps.leakSignatures } : {}),
      ...(deps.audit ? { audit: deps.audit } : {}),
    };
    await app.register(identityRoutes(deps.keys, options));
  }

  return app;
}
