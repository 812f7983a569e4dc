import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import fastifyPlugin from 'fastify-plugin';
import FindMyWay, { type HTTPMethod } from 'find-my-way';
import {
  type AuthenticationCounts,
  type Authenticator,
  authHook,
  type CredentialPolicy,
  usageHook,
} from '../auth/authenticator.js';
import type { AccessLimiter } from '../auth/rate-limits.js';
import type { KeyUsage } from '../auth/usage-recorder.js';
import {
  InputError,
  MethodNotAllowedError,
  NotAcceptableError,
  NotFoundError,
  UnavailableError,
  UnsupportedMediaTypeError,
} from '../foundation/errors.js';
import { CREDENTIAL_PARAMETERS, redactCredentials, redactUrl } from '../foundation/redact-url.js';
import { answersAcceptable } from '../http/acceptable.js';
import { type AccessLog, installAccessLog } from '../http/access-log.js';
import { closeAfterAnswer } from '../http/connection-close.js';
import { streamedJsonBodyParser } from '../http/json-body.js';
import {
  API_KEY_CHALLENGE,
  answerUnmetExpectation,
  BEARER_CHALLENGE,
  DEFAULT_RETRY_AFTER_S,
  handleError,
  writeRawProblem,
} from '../http/problem.js';
import { queryHooks } from '../http/query.js';
import { type Tracing, traceRequests } from '../observability/tracing.js';

export interface RequestPipelineOptions {
  readonly authenticator: Authenticator;
  readonly rateLimits: AccessLimiter;
  /** D32: where the answers of requests made with API keys are counted; nowhere when left out. */
  readonly usage?: KeyUsage;
  readonly timeouts: { readonly requestMs: number; readonly keepAliveMs: number };
  readonly tracing?: Tracing;
  /** The access line and the requests' metrics (D25), shared with the fast path. */
  readonly accessLog: AccessLog;
  /** Where authentications are counted (D25), shared with the fast path. */
  readonly counts: AuthenticationCounts;
  /** Told when the instance starts draining (its `preClose`). */
  readonly onDraining: () => void;
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

/** The challenges of a 401 (RFC 9110 §11.6.1): one per credential the route takes. */
const CHALLENGES: Record<CredentialPolicy, readonly string[]> = {
  'api-key-or-token': [API_KEY_CHALLENGE, BEARER_CHALLENGE],
  'access-token': [BEARER_CHALLENGE],
};

/**
 * Routes that answer pages for people (HTML, scripts, styles), not JSON: `Accept` is theirs to weigh.
 * The documentation (D29) and the console (D33).
 */
const PAGES = ['/docs', '/console'];

/**
 * D29: what HTTP defines before a body is read. A request that accepts no answer the API can give
 * is 406, and one whose body is content-coded (the service decodes none) 415 (RFC 9110 §15.5.16).
 */
function unanswerable(request: FastifyRequest): Error | undefined {
  const route = request.routeOptions.url;
  if (
    route !== undefined &&
    !PAGES.some((pages) => route.startsWith(pages)) &&
    !answersAcceptable(request.headers.accept)
  ) {
    return new NotAcceptableError(
      'Accept rules out every answer of this operation: it answers application/json, and application/problem+json when it fails.',
    );
  }
  const coding = request.headers['content-encoding'];
  if (coding !== undefined && coding.trim().toLowerCase() !== 'identity') {
    return new UnsupportedMediaTypeError(
      'The service takes request bodies without a content coding: send the JSON itself.',
    );
  }
  return undefined;
}

/**
 * How every request is handled, whatever its route (a plugin on the root context, so that its hooks
 * apply to every route): JSON bodies, the request's span, the access line, problem documents for every
 * error (D2), 405 and 404, each route's credential, scope and query checks bound once, and the drain.
 */
async function pipeline(fastify: FastifyInstance, options: RequestPipelineOptions): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  const deps = options;
  const { timeouts } = options;
  // JSON only (D29): a body of any other media type, or of none, is 415 before any of it is read.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('application/json', streamedJsonBodyParser);

  // First of the hooks, so that everything a request does happens inside its span.
  if (deps.tracing) await traceRequests(app, deps.tracing);
  app.decorateRequest('principal', null);
  installAccessLog(app, options.accessLog);
  const { counts } = options;
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
    const needs = route.config?.auth;
    route.config = {
      ...route.config,
      operation: route.schema?.operationId ?? route.url,
      challenges: route.config?.challenges ?? CHALLENGES[needs?.policy ?? 'api-key-or-token'],
    };
    if (needs) {
      route.onRequest = [
        ...hooksOf(route.onRequest),
        authHook(deps.authenticator, deps.rateLimits, needs, counts, deps.usage),
      ];
      if (deps.usage) route.onResponse = [...hooksOf(route.onResponse), usageHook(deps.usage)];
    }
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
    options.onDraining();
  });
  // Hooks that need not wait for anything take a callback: Fastify runs them without a promise.
  app.addHook('onRequest', (request, reply, done) => {
    reply.header('x-request-id', request.id);
    if (draining) done(new UnavailableError('the service is shutting down; retry with backoff'));
    else done(missingHost(request.raw) ?? credentialInQuery(request.query));
  });
  // Once the credential is known and counted (its answer tells the budget, D10), before the body is read.
  app.addHook('preParsing', (request, _reply, payload, done) => {
    done(unanswerable(request) ?? null, payload);
  });
  // While draining, every answer closes its connection: an idle keep-alive socket would otherwise
  // hold the server open until its timeout.
  app.addHook('onSend', (_request, reply, payload, done) => {
    if (draining) reply.header('connection', 'close');
    // D29: every 503 says when to come back, whichever part answered it (readiness too).
    if (reply.statusCode === 503 && !reply.hasHeader('retry-after')) {
      reply.header('retry-after', String(DEFAULT_RETRY_AFTER_S));
    }
    // A redirect may repeat the request's URL (the docs' pages do), credential included (D21).
    if (reply.statusCode >= 300 && reply.statusCode < 400) {
      const location = reply.getHeader('location');
      if (typeof location === 'string') reply.header('location', redactUrl(location));
    }
    done(null, payload);
  });
  app.decorateRequest('queryProblems', null);
}

export const requestPipeline = fastifyPlugin(pipeline, { name: 'request-pipeline' });
