import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import {
  type CountedSeries,
  httpDuration,
  httpRequests,
  type ObservedSeries,
  rateLimitRefusals,
} from '../observability/metrics.js';
import type { ProblemCode } from '../schemas/common.js';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** What the access line and the metrics call the route: its operation id, else its path pattern. */
    operation?: string;
  }
  interface FastifyRequest {
    /** Why the request was refused, when it was: for the access line, set by the problem handler. */
    refusal: { readonly code: ProblemCode; readonly detail: string } | null;
  }
}

/** Secrets that must never reach a log line, whatever a serializer or a debug level does. */
export const REDACTED_PATHS = [
  'req.headers.authorization',
  'req.headers["x-api-key"]',
  'headers.authorization',
  'headers["x-api-key"]',
];

/** Query parameters that may carry a credential (D21): their values never reach a log line. */
export const CREDENTIAL_PARAMETERS: ReadonlySet<string> = new Set([
  'api_key',
  'apikey',
  'x-api-key',
  'key',
  'token',
  'access_token',
]);
/** A query that may name one of them, in any case or encoding: only such a query is looked at closely. */
const MAY_HOLD_CREDENTIAL = /key|token|%/i;

/** The request's path and query, with the value of any credential-like parameter left out. */
export function loggableUrl(url: string): string {
  const query = url.indexOf('?');
  if (query === -1 || !MAY_HOLD_CREDENTIAL.test(url.slice(query + 1))) return url;
  const parameters = url
    .slice(query + 1)
    .split('&')
    .map((pair) => {
      const equals = pair.indexOf('=');
      const name = equals === -1 ? pair : pair.slice(0, equals);
      let decoded = name;
      try {
        decoded = decodeURIComponent(name.replaceAll('+', ' '));
      } catch {
        // an undecodable name is logged as sent; it names no credential parameter
      }
      return CREDENTIAL_PARAMETERS.has(decoded.toLowerCase()) ? `${name}=[redacted]` : pair;
    });
  return `${url.slice(0, query)}?${parameters.join('&')}`;
}

/**
 * One access line per request (D25), when the answer has been sent, in place of Fastify's two: the
 * operation, the outcome, how long it took and how many bytes it sent, and who asked (key id or
 * user, and account; never a secret). A refusal carries its code and reason.
 *
 * Written through the application's logger with the request id as a field, as the request's own
 * logger would write it: that logger is then never made for a request that logs nothing else (see
 * request-logger.ts). So a route's own `logLevel` or `logSerializers` would not apply to this line;
 * no route sets them.
 */
export function logAccess(request: FastifyRequest, reply: FastifyReply): void {
  const length = reply.getHeader('content-length');
  // Set on every route when it is added (app.ts); absent on a request no route took.
  const operation = request.routeOptions.config.operation;
  observe(request, reply, operation);
  // Only the fields that apply: pino looks at every key it is given.
  const line: Record<string, string | number | null> = {
    reqId: request.id,
    op: operation ?? null,
    method: request.method,
    url: loggableUrl(request.url),
    status: reply.statusCode,
    ms: Math.round(reply.elapsedTime * 100) / 100,
    bytes: length === undefined ? 0 : Number(length),
  };
  const principal = request.principal;
  if (principal) {
    const credential = principal.credential;
    if (credential.kind === 'api-key') line.keyId = credential.keyId;
    else line.user = credential.subject;
    line.account = principal.accountId;
  }
  const refusal = request.refusal;
  if (refusal) {
    line.code = refusal.code;
    line.detail = refusal.detail;
  }
  request.server.log.info(line, 'request');
}

/** Methods a label may name; any other is counted as `other`. */
const METHODS = new Set(['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS']);

/** The counter and histogram of one label set, bound once: a request then neither builds nor hashes labels. */
interface BoundSeries {
  readonly count: CountedSeries<string>;
  readonly duration: ObservedSeries<string>;
}
const bound = new Map<string, BoundSeries>();

/** The request's metrics (D25): labels from fixed sets only (an unrouted path is `unmatched`). */
function observe(request: FastifyRequest, reply: FastifyReply, operation: string | undefined): void {
  const method = METHODS.has(request.method) ? request.method : 'other';
  const key = `${operation ?? 'unmatched'} ${method} ${reply.statusCode}`;
  let series = bound.get(key);
  if (!series) {
    const labels = { operation: operation ?? 'unmatched', method, status: String(reply.statusCode) };
    series = { count: httpRequests.bind(labels), duration: httpDuration.bind(labels) };
    bound.set(key, series);
  }
  series.count.inc();
  series.duration.observe(reply.elapsedTime / 1000);
  if (reply.statusCode === 429 && request.refusal?.code === 'rate_limited') {
    rateLimitRefusals.inc({ limit: request.principal ? 'credential' : 'auth_failures' });
  }
}

/** Installs the access line on `app`; requests then carry a `refusal` for the problem handler to fill. */
export function installAccessLog(app: FastifyInstance): void {
  app.decorateRequest('refusal', null);
  app.addHook('onResponse', (request, reply, done) => {
    logAccess(request, reply);
    done();
  });
}
