import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import {
  AuthenticationError,
  ForbiddenError,
  InputError,
  type InputLocation,
  type InputProblem,
  NotFoundError,
  RateLimitError,
  UnavailableError,
} from '../errors.js';
import type { Problem, ProblemCode } from '../schemas/common.js';

const TITLES: Record<ProblemCode, string> = {
  invalid_request: 'Invalid request',
  unauthenticated: 'Unauthenticated',
  forbidden: 'Forbidden',
  plan_required: 'Plan required',
  not_found: 'Not found',
  rate_limited: 'Too many requests',
  internal: 'Internal error',
  unavailable: 'Service unavailable',
};

export const PROBLEM_CONTENT_TYPE = 'application/problem+json';

export function problem(
  status: number,
  code: ProblemCode,
  detail: string,
  requestId: string,
  errors?: readonly InputProblem[],
): Problem {
  return {
    type: `urn:playbook:problem:${code.replaceAll('_', '-')}`,
    title: TITLES[code],
    status,
    code,
    detail,
    requestId,
    ...(errors && errors.length > 0 ? { errors: [...errors] } : {}),
  };
}

const CONTEXTS: Record<string, InputLocation> = {
  querystring: 'query',
  params: 'path',
  body: 'body',
  headers: 'header',
};

interface AjvError {
  instancePath: string;
  keyword: string;
  message?: string;
  params: Record<string, unknown>;
}

/** Turns one schema-validation error into a problem that names its field. */
function toInputProblem(location: InputLocation, error: AjvError): InputProblem {
  const segments = error.instancePath.split('/').filter(Boolean);
  // A query parameter is named as the caller sent it (`kind`), not by the path of one element of
  // the array it was parsed into (`kind.1`); the element goes into the message instead.
  const element = location === 'query' && segments.length > 1 ? `element ${Number(segments[1]) + 1} ` : '';
  const base = element ? segments[0]! : segments.join('.');
  const join = (child: string) => (base ? `${base}.${child}` : child);
  switch (error.keyword) {
    case 'required':
      return { in: location, name: join(String(error.params.missingProperty)), message: 'is required' };
    case 'additionalProperties': {
      const name = join(String(error.params.additionalProperty));
      const what = location === 'query' ? 'parameter' : 'field';
      return { in: location, name, message: `is not a known ${what}` };
    }
    case 'enum': {
      const allowed = (error.params.allowedValues as unknown[] | undefined)?.join(', ');
      return { in: location, name: base || '(root)', message: `${element}must be one of: ${allowed}` };
    }
    default:
      return { in: location, name: base || '(root)', message: `${element}${error.message ?? 'is invalid'}` };
  }
}

/** Errors the router raises before any route runs: a path it cannot decode, or a value past its limit. */
const ROUTER_ERRORS = new Set(['FST_ERR_BAD_URL', 'FST_ERR_MAX_PARAM_LENGTH']);

/** Errors that mean a backend is out of reach rather than that the request is wrong. */
function isUnavailable(error: unknown): boolean {
  if (error instanceof UnavailableError) return true;
  const code = String((error as { code?: unknown }).code);
  const message = String((error as { message?: unknown }).message ?? '');
  return (
    ['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'ENOTFOUND', 'EPIPE', 'EHOSTUNREACH', 'EAI_AGAIN'].includes(
      code,
    ) ||
    // PostgreSQL SQLSTATEs: connection exceptions (08), insufficient resources (53, e.g. too many
    // connections), operator intervention (57P, shutdown and restart), and 57014, a statement
    // cancelled by statement_timeout because the server did not finish in time.
    /^(08[0-9A-Z]{3}|53[0-9A-Z]{3}|57P[0-9A-Z]{2}|57014)$/.test(code) ||
    // Client-side bounds of `pg` (pool checkout, connect, query read) carry no code.
    /Connection terminated|timeout exceeded when trying to connect|Query read timeout|connect ECONNREFUSED|Client has encountered a connection error/i.test(
      message,
    )
  );
}

function classify(error: FastifyError | Error): {
  status: number;
  code: ProblemCode;
  detail: string;
  errors?: InputProblem[];
} {
  if (error instanceof InputError) {
    return {
      status: 400,
      code: 'invalid_request',
      detail: 'The request is invalid.',
      errors: [...error.problems],
    };
  }
  const fastifyError = error as FastifyError;
  if (fastifyError.validation) {
    const location = CONTEXTS[fastifyError.validationContext ?? 'body'] ?? 'body';
    const errors = fastifyError.validation.map((e) => toInputProblem(location, e as unknown as AjvError));
    return { status: 400, code: 'invalid_request', detail: 'The request is invalid.', errors };
  }
  if (error instanceof AuthenticationError)
    return { status: 401, code: 'unauthenticated', detail: error.message };
  if (error instanceof ForbiddenError) return { status: 403, code: error.reason, detail: error.message };
  if (error instanceof NotFoundError) return { status: 404, code: 'not_found', detail: error.message };
  if (error instanceof RateLimitError) return { status: 429, code: 'rate_limited', detail: error.message };
  if (isUnavailable(error)) {
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
  if (status !== undefined && status >= 400 && status < 500) {
    // Fastify's own request errors (unparsable JSON, wrong content type, body too large…): the
    // contract answers every malformed request with 400.
    const errors: InputProblem[] =
      fastifyError.code?.startsWith('FST_ERR_CTP') === true
        ? [{ in: 'body', name: '(body)', message: error.message }]
        : [];
    return { status: 400, code: 'invalid_request', detail: error.message, errors };
  }
  return { status: 500, code: 'internal', detail: 'The service could not complete the request.' };
}

/** The one place where errors become HTTP answers (D2). Unexpected errors are logged, never shown. */
export function handleError(error: FastifyError | Error, request: FastifyRequest, reply: FastifyReply) {
  const { status, code, detail, errors } = classify(error);
  if (status >= 500) request.log.error({ err: error }, 'request failed');
  // The access line (access-log.ts) says why; a refusal is no event of its own.
  request.refusal = { code, detail };
  if (error instanceof RateLimitError) reply.header('retry-after', String(error.retryAfterSeconds));
  if (status === 401) reply.header('www-authenticate', 'Bearer, ApiKey header="x-api-key"');
  // Errors raised before the onRequest hooks (router errors) have not had their request id set yet.
  reply.header('x-request-id', request.id);
  // A validator set for a success that did not happen must not travel with the error (D11).
  reply.removeHeader('etag');
  return reply
    .code(status)
    .header('cache-control', 'no-store')
    .type(PROBLEM_CONTENT_TYPE)
    .send(problem(status, code, detail, request.id, errors));
}
