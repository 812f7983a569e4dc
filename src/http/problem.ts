import { randomUUID } from 'node:crypto';
import { type IncomingMessage, type ServerResponse, STATUS_CODES } from 'node:http';
import type { Duplex } from 'node:stream';
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import {
  AuthenticationError,
  CapacityError,
  ConflictError,
  ContentTooLargeError,
  ForbiddenError,
  InputError,
  type InputLocation,
  type InputProblem,
  KeyAlreadyRolledError,
  LimitError,
  MethodNotAllowedError,
  NotAcceptableError,
  NotConfiguredError,
  NotFoundError,
  PreconditionFailedError,
  RateLimitError,
  SyncTokenError,
  UnavailableError,
  UnsupportedMediaTypeError,
  WriteContentionError,
} from '../foundation/errors.js';
import { redactCredentials } from '../foundation/redact-url.js';
import {
  MAX_LISTED_PROBLEMS,
  MAX_PROBLEM_DETAIL,
  MAX_PROBLEM_TEXT,
  PROBLEM_TITLES,
  type Problem,
  type ProblemCode,
  problemTypeUrl,
} from '../schemas/common.js';
import { fieldProblems, type SchemaError } from '../schemas/schema-check.js';
import { withQueryProblems } from './query.js';

declare module 'fastify' {
  interface FastifyContextConfig {
    /**
     * The challenges a 401 of the route carries in `WWW-Authenticate` (RFC 9110 §11.6.1), one per
     * credential the route takes; set for every route when it is added (request-pipeline.ts).
     */
    challenges?: readonly string[];
  }
}

export const PROBLEM_CONTENT_TYPE = 'application/problem+json';

/** Extension members of a problem document, beside the standard ones (RFC 9457 §3.2). */
export interface ProblemExtensions {
  /** `key_already_rolled`: the key that replaced the one the request named. */
  readonly replacedBy?: string;
}

/** What a 503 tells the caller to wait when the cause names no time of its own (RFC 9110 §10.2.3). */
export const DEFAULT_RETRY_AFTER_S = 1;

/**
 * A text about to be cut to `max`, first cut to a little more, so that redacting it costs what the
 * answer shows, not what the request sent: enough is kept past `max` for a credential that starts
 * before the cut to be recognised whole.
 */
function bounded(text: string, max: number): string {
  return text.length > max + 4096 ? text.slice(0, max + 4096) : text;
}

/**
 * A problem document. Its texts may quote the request (a parameter's name, a value, a path, what a
 * framework error says): a credential-shaped run in them is written `[redacted]` before any is cut,
 * so that no part of one is shown (D21).
 */
export function problem(
  status: number,
  code: ProblemCode,
  detail: string,
  requestId: string,
  errors?: readonly InputProblem[],
  extensions: ProblemExtensions = {},
): Problem {
  return {
    type: problemTypeUrl(code),
    title: PROBLEM_TITLES[code],
    status,
    code,
    detail: cut(redactCredentials(bounded(detail, MAX_PROBLEM_DETAIL)), MAX_PROBLEM_DETAIL),
    requestId,
    ...(errors && errors.length > 0
      ? {
          errors: errors.map((e) => ({
            in: e.in,
            name: cut(redactCredentials(bounded(e.name, MAX_PROBLEM_TEXT)), MAX_PROBLEM_TEXT),
            message: cut(redactCredentials(bounded(e.message, MAX_PROBLEM_TEXT)), MAX_PROBLEM_TEXT),
          })),
        }
      : {}),
    ...extensions,
  };
}

/** Text bounded as the Problem schema says: what is cut ends with an ellipsis. */
function cut(text: string, max: number): string {
  if (text.length <= max) return text;
  // Never half a surrogate pair: the cut text stays well-formed.
  const end = /[\uD800-\uDBFF]/.test(text[max - 2] ?? '') ? max - 2 : max - 1;
  return `${text.slice(0, end)}…`;
}

const CONTEXTS: Record<string, InputLocation> = {
  querystring: 'query',
  params: 'path',
  body: 'body',
  headers: 'header',
};

/**
 * The problems of a part of a request that failed its schema, one per field (schemas/schema-check.ts,
 * the one translator), each placed in the part it came from.
 */
export function onePerField(location: InputLocation, errors: readonly SchemaError[]): InputProblem[] {
  return fieldProblems(errors, { parameters: location === 'query' }).map(({ name, message }) => ({
    in: location,
    name: name || '(root)',
    message,
  }));
}

/** Errors the router raises before any route runs: a path it cannot decode, or a value past its limit. */
const ROUTER_ERRORS = new Set(['FST_ERR_BAD_URL', 'FST_ERR_MAX_PARAM_LENGTH']);

/** Fastify's own errors of a request body, by the status Fastify gives them. */
const BODY_STATUSES: Readonly<Record<number, { code: ProblemCode; detail: string }>> = {
  413: {
    code: 'content_too_large',
    detail: 'The request body is larger than this operation takes; nothing of it was used.',
  },
  415: {
    code: 'unsupported_media_type',
    detail: 'This operation takes a JSON body: send it with Content-Type: application/json.',
  },
};

function classify(error: FastifyError | Error): {
  status: number;
  code: ProblemCode;
  detail: string;
  errors?: InputProblem[];
  extensions?: ProblemExtensions;
} {
  if (error instanceof InputError) {
    return {
      status: 400,
      code: 'invalid_request',
      detail: error.stoppedEarly
        ? `The request is invalid; checking stopped at problem ${MAX_LISTED_PROBLEMS + 1}: the first ${MAX_LISTED_PROBLEMS} are listed, and more may follow.`
        : 'The request is invalid.',
      errors: [...error.problems],
    };
  }
  if (error instanceof ContentTooLargeError) {
    return { status: 413, code: 'content_too_large', detail: error.message };
  }
  if (error instanceof UnsupportedMediaTypeError) {
    return { status: 415, code: 'unsupported_media_type', detail: error.message };
  }
  if (error instanceof NotAcceptableError) {
    return { status: 406, code: 'not_acceptable', detail: error.message };
  }
  const fastifyError = error as FastifyError;
  if (fastifyError.validation) {
    const location = CONTEXTS[fastifyError.validationContext ?? 'body'] ?? 'body';
    const errors = onePerField(location, fastifyError.validation as unknown as SchemaError[]);
    return { status: 400, code: 'invalid_request', detail: 'The request is invalid.', errors };
  }
  if (error instanceof LimitError) return { status: 400, code: 'limit_reached', detail: error.message };
  if (error instanceof AuthenticationError)
    return { status: 401, code: 'unauthenticated', detail: error.message };
  if (error instanceof ForbiddenError) return { status: 403, code: error.reason, detail: error.message };
  if (error instanceof NotFoundError) return { status: 404, code: 'not_found', detail: error.message };
  if (error instanceof MethodNotAllowedError) {
    return { status: 405, code: 'method_not_allowed', detail: error.message };
  }
  if (error instanceof ConflictError) {
    const errors = error.problems.length > 0 ? { errors: [...error.problems] } : {};
    const extensions =
      error instanceof KeyAlreadyRolledError ? { extensions: { replacedBy: error.replacedBy } } : {};
    return { status: 409, code: error.reason, detail: error.message, ...errors, ...extensions };
  }
  if (error instanceof PreconditionFailedError) {
    return { status: 412, code: 'precondition_failed', detail: error.message };
  }
  if (error instanceof SyncTokenError) {
    const invalid = error.reason === 'invalid_sync_token';
    return {
      status: invalid ? 400 : 410,
      code: error.reason,
      detail: error.message,
      ...(invalid
        ? { errors: [{ in: 'query' as const, name: error.parameter, message: error.message }] }
        : {}),
    };
  }
  if (error instanceof NotConfiguredError) {
    return { status: 501, code: 'not_implemented', detail: error.message };
  }
  if (error instanceof RateLimitError) return { status: 429, code: 'rate_limited', detail: error.message };
  // Backends translate their outages where they happen (the database adapter, the S3 store).
  if (error instanceof WriteContentionError || error instanceof CapacityError)
    return { status: 503, code: 'unavailable', detail: error.message };
  if (error instanceof UnavailableError) {
    return {
      status: 503,
      code: 'unavailable',
      detail: 'A backend of the service is unavailable; retry with backoff.',
    };
  }
  if (fastifyError.code !== undefined && ROUTER_ERRORS.has(fastifyError.code)) {
    // The router's message quotes the whole path; the problem says what is wrong without echoing it.
    return {
      status: 400,
      code: 'invalid_request',
      detail: 'The request path is invalid.',
      errors: [{ in: 'path', name: '(path)', message: 'is not a valid path for this service' }],
    };
  }
  const status = fastifyError.statusCode;
  // Fastify's own: a body over the route's limit (decided from Content-Length before any of it is
  // read, or as soon as a chunked one passes it), or in a media type no parser takes (D29).
  const body = status === undefined ? undefined : BODY_STATUSES[status];
  if (body) return { status: status!, ...body };
  if (status !== undefined && status >= 400 && status < 500) {
    // Fastify's other request errors (a body that does not match its Content-Length…): the
    // contract answers every malformed request with 400.
    const errors: InputProblem[] =
      fastifyError.code?.startsWith('FST_ERR_CTP') === true
        ? [{ in: 'body', name: '(body)', message: error.message }]
        : [];
    return { status: 400, code: 'invalid_request', detail: error.message, errors };
  }
  return { status: 500, code: 'internal', detail: 'The service could not complete the request.' };
}

/** The problems a 400 lists, and its detail: the list bounded, so a small request never makes a large answer. */
function listed(
  detail: string,
  errors: InputProblem[] | undefined,
  stoppedEarly: boolean,
): { detail: string; errors?: InputProblem[] } {
  if (!errors || errors.length <= MAX_LISTED_PROBLEMS) return errors ? { detail, errors } : { detail };
  // Checking that stopped early cannot count what it did not check: the detail already says so.
  if (stoppedEarly) return { detail, errors: errors.slice(0, MAX_LISTED_PROBLEMS) };
  const more = errors.length - MAX_LISTED_PROBLEMS;
  return {
    detail: `${detail} ${more} more problem${more === 1 ? ' is' : 's are'} not listed.`,
    errors: errors.slice(0, MAX_LISTED_PROBLEMS),
  };
}

/** The one place where errors become HTTP answers (D2). Unexpected errors are logged, never shown. */
export function handleError(error: FastifyError | Error, request: FastifyRequest, reply: FastifyReply) {
  const classified = classify(error);
  const { status, code } = classified;
  const all = (error as FastifyError).validation
    ? withQueryProblems(request, classified.errors ?? [])
    : classified.errors;
  const stoppedEarly = error instanceof InputError && error.stoppedEarly;
  const { detail: listedDetail, errors } = listed(classified.detail, all, stoppedEarly);
  // The access line writes the reason too.
  const detail = redactCredentials(listedDetail);
  // The logger's serializer writes the error's texts redacted (access-log.ts). An outage is no event of
  // each request's: its dependency says once that it is down and once that it is back (D31), and the
  // access line gives each answer's status and reason.
  if (status >= 500 && !(error instanceof UnavailableError))
    request.log.error({ err: error }, 'request failed');
  // The access line (access-log.ts) says why; a refusal is no event of its own.
  request.refusal = { code, detail };
  if (error instanceof RateLimitError || error instanceof UnavailableError) {
    reply.header('retry-after', String(error.retryAfterSeconds));
  } else if (status === 503) {
    reply.header('retry-after', String(DEFAULT_RETRY_AFTER_S));
  }
  if (error instanceof MethodNotAllowedError) reply.header('allow', error.allowed.join(', '));
  // RFC 9110 §11.6.1: a 401 names at least one way to authenticate.
  if (status === 401) reply.header('www-authenticate', challengesOf(request));
  // Refused before its body was read (a 401, a 413, a 415…): the rest of the body is not waited for,
  // however large it says it is; the connection closes after the answer.
  if (!request.raw.complete) reply.header('connection', 'close');
  // Errors raised before the onRequest hooks (router errors) have not had their request id set yet.
  reply.header('x-request-id', request.id);
  // A validator set for a success that did not happen must not travel with the error (D11).
  reply.removeHeader('etag');
  return reply
    .code(status)
    .header('cache-control', 'no-store')
    .type(PROBLEM_CONTENT_TYPE)
    .send(problem(status, code, detail, request.id, errors, classified.extensions));
}

/**
 * The challenges of the route the request reached. Every route has its own (request-pipeline.ts); a 401
 * of no route names both credentials of the API.
 */
function challengesOf(request: FastifyRequest): string | string[] {
  const challenges = request.routeOptions?.config?.challenges ?? [API_KEY_CHALLENGE, BEARER_CHALLENGE];
  // Several challenges go in a field each, which a client reads as one list (RFC 9110 §5.3).
  return challenges.length === 1 ? challenges[0]! : [...challenges];
}

/** The `x-api-key` header, as a challenge: no registered scheme names one, so it is named here. */
export const API_KEY_CHALLENGE = 'ApiKey realm="playbook", header="x-api-key"';
/** A user access token in `Authorization: Bearer` (RFC 6750 §3). */
export const BEARER_CHALLENGE = 'Bearer realm="playbook"';

/**
 * Errors Node's HTTP parser raises before any request exists (a malformed request line, headers over
 * the limit, a request too slow, D20): answered with a problem document like every other error (D2),
 * then the connection is closed, since what follows on it cannot be trusted.
 */
export function handleClientError(error: Error & { code?: string }, socket: Duplex): void {
  if (error.code === 'ECONNRESET' || socket.destroyed) return;
  const [status, code, detail]: [number, ProblemCode, string] =
    error.code === 'ERR_HTTP_REQUEST_TIMEOUT'
      ? [408, 'request_timeout', 'The request did not arrive in time.']
      : error.code === 'HPE_HEADER_OVERFLOW'
        ? [431, 'headers_too_large', 'The request headers are larger than the service accepts.']
        : [400, 'invalid_request', 'The request is not valid HTTP.'];
  writeRawProblem(socket, status, code, detail);
}

/**
 * A request with an `Expect` other than `100-continue`, which Node answers before any route runs
 * (RFC 9110 §10.1.1): a 417 problem document rather than Node's bare one.
 */
export function answerUnmetExpectation(request: IncomingMessage, response: ServerResponse): void {
  const { headers, body } = standaloneProblem(
    417,
    'expectation_failed',
    'Expect takes only 100-continue here.',
  );
  response.writeHead(417, headers).end(body);
  request.resume();
}

/** A problem document written straight to a socket that no request or reply stands for; closes it. */
export function writeRawProblem(
  socket: Duplex,
  status: number,
  code: ProblemCode,
  detail: string,
  extra: Record<string, string> = {},
): void {
  const { headers, body } = standaloneProblem(status, code, detail);
  const lines = [
    `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? 'Error'}`,
    ...Object.entries({ ...headers, ...extra }).map(([name, value]) => `${name}: ${value}`),
  ];
  if (socket.writable) socket.end(`${lines.join('\r\n')}\r\n\r\n${body}`);
  else socket.destroy();
}

/**
 * A problem document answered outside Fastify (before any request exists, or for Node itself), with
 * the headers every such answer carries: a fresh request id, no caching, and the connection closed.
 */
function standaloneProblem(
  status: number,
  code: ProblemCode,
  detail: string,
): { headers: Record<string, string>; body: string } {
  const requestId = randomUUID();
  const body = JSON.stringify(problem(status, code, detail, requestId));
  return {
    headers: {
      'content-type': PROBLEM_CONTENT_TYPE,
      'content-length': String(Buffer.byteLength(body)),
      'x-request-id': requestId,
      'cache-control': 'no-store',
      connection: 'close',
    },
    body,
  };
}
