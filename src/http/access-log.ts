import type { FastifyBaseLogger, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import pino from 'pino';
import { redactCredentials, redactUrl } from '../foundation/redact-url.js';
import type { CountedSeries, Metrics, ObservedSeries } from '../observability/metrics.js';
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

/**
 * Serializers for the objects a log line may carry, so that Fastify's own lines and ours write no
 * credential a URL or an error message quotes (D21): a request's URL, and every text of an error
 * (its message and stack quote what they were given, a URL included), redacted by form.
 */
export const CREDENTIAL_SAFE_SERIALIZERS = {
  // Given a Fastify request, or by other code a Node one: each field only when it is there.
  req: (request: Partial<Pick<FastifyRequest, 'method' | 'url' | 'host' | 'ip'>>) => ({
    method: request.method,
    url: typeof request.url === 'string' ? redactUrl(request.url) : undefined,
    host: typeof request.host === 'string' ? redactCredentials(request.host) : undefined,
    remoteAddress: request.ip,
  }),
  err: (error: Error) => {
    const serialized = pino.stdSerializers.err(error);
    return redactedTexts(serialized, 4) as typeof serialized;
  },
};

/** `value` with every string in it redacted, a few levels deep (an error, its causes, their fields). */
function redactedTexts(value: unknown, depth: number): unknown {
  if (typeof value === 'string') return redactCredentials(value);
  if (depth === 0 || typeof value !== 'object' || value === null) return value;
  if (Array.isArray(value)) return value.map((item) => redactedTexts(item, depth - 1));
  const copy: Record<string, unknown> = {};
  for (const [name, field] of Object.entries(value)) copy[name] = redactedTexts(field, depth - 1);
  return copy;
}

/** The fields of an access line, in the order they are written; only those that apply are given. */
export interface AccessLine {
  reqId: string;
  op: string | null;
  method: string;
  url: string;
  status: number;
  ms: number;
  bytes: number;
  client: string | null;
  keyId?: string;
  user?: string;
  account?: string | null;
  code?: ProblemCode;
  detail?: string;
}

/** A request's time in milliseconds as the access line gives it: to a hundredth. */
export function accessMs(elapsedMs: number): number {
  return Math.round(elapsedMs * 100) / 100;
}

/**
 * One access line per request (D25), when the answer has been sent, in place of Fastify's two: the
 * operation, the outcome, how long it took and how many bytes it sent, and who asked (key id or
 * user, and account; never a secret). A refusal carries its code and reason. The request is counted
 * in the metrics as it is written.
 *
 * Written through the application's logger with the request id as a field, as the request's own
 * logger would write it: that logger is then never made for a request that logs nothing else (see
 * request-logger.ts). So a route's own `logLevel` or `logSerializers` would not apply to this line;
 * no route sets them. Requests answered before Fastify's lifecycle (the fast path) write theirs here
 * too (`write`), so every request has the same line and the same counts.
 */
export class AccessLog {
  private readonly observe: ReturnType<typeof requestMetrics>;

  constructor(metrics: Metrics) {
    this.observe = requestMetrics(metrics);
  }

  /** Counts and writes `line`, of a request that took `elapsedMs`, through `logger`. */
  write(logger: FastifyBaseLogger, line: AccessLine, elapsedMs: number, counted: boolean): void {
    this.observe(line, elapsedMs / 1000, counted);
    logger.info(line, 'request');
  }

  /** The line of a request Fastify handled. */
  record(request: FastifyRequest, reply: FastifyReply): void {
    const length = reply.getHeader('content-length');
    const elapsedMs = reply.elapsedTime;
    // Only the fields that apply: pino looks at every key it is given.
    const line: AccessLine = {
      reqId: request.id,
      // Set on every route when it is added (request-pipeline.ts); absent on a request no route took.
      op: request.routeOptions.config.operation ?? null,
      method: request.method,
      url: redactUrl(request.url),
      status: reply.statusCode,
      ms: accessMs(elapsedMs),
      bytes: length === undefined ? 0 : Number(length),
      // The client's address as PLAYBOOK_TRUST_PROXY lets the service believe it (D31).
      client: request.ip ?? null,
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
    this.write(request.server.log, line, elapsedMs, principal !== null);
  }
}

/** Methods a label may name; any other is counted as `other`. */
const METHODS = new Set(['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS']);

/** The counter and histogram of one label set, bound once: a request then neither builds nor hashes labels. */
interface BoundSeries {
  readonly count: CountedSeries<string>;
  readonly duration: ObservedSeries<string>;
}

/**
 * The request's metrics (D25): labels from fixed sets only (an unrouted path is `unmatched`); a 429
 * of the rate limits counts which limit refused, the credential's (`authenticated`) or the address's.
 */
function requestMetrics(metrics: Metrics) {
  const bound = new Map<string, BoundSeries>();
  return (line: AccessLine, seconds: number, authenticated: boolean): void => {
    const method = METHODS.has(line.method) ? line.method : 'other';
    const operation = line.op ?? 'unmatched';
    const key = `${operation} ${method} ${line.status}`;
    let series = bound.get(key);
    if (!series) {
      const labels = { operation, method, status: String(line.status) };
      series = { count: metrics.httpRequests.bind(labels), duration: metrics.httpDuration.bind(labels) };
      bound.set(key, series);
    }
    series.count.inc();
    series.duration.observe(seconds);
    if (line.status === 429 && line.code === 'rate_limited') {
      metrics.rateLimitRefusals.inc({ limit: authenticated ? 'credential' : 'auth_failures' });
    }
  };
}

/**
 * Installs the access line and the request metrics on `app`; requests then carry a `refusal` for the
 * problem handler to fill.
 */
export function installAccessLog(app: FastifyInstance, log: AccessLog): void {
  app.decorateRequest('refusal', null);
  app.addHook('onResponse', (request, reply, done) => {
    log.record(request, reply);
    done();
  });
}
