import type { IncomingMessage, ServerResponse } from 'node:http';
import type { FastifyBaseLogger } from 'fastify';
import type { HeldRead, ReadAnswers } from '../answers/read-answers.js';
import type { AuthenticationCounts, Authenticator } from '../auth/authenticator.js';
import { addressAllowed } from '../auth/key-restrictions.js';
import type { Principal } from '../auth/principal.js';
import {
  type AccessLimiter,
  COUNTED_WINDOW,
  type CountedLimits,
  type CountedRequest,
  rateLimitHeaders,
} from '../auth/rate-limits.js';
import type { KeyUsage } from '../auth/usage-recorder.js';
import { redactUrl } from '../foundation/redact-url.js';
import { answersAcceptable } from '../http/acceptable.js';
import { type AccessLine, type AccessLog, accessMs } from '../http/access-log.js';
import {
  type Answer,
  CACHE_CONTROL,
  type Encoding,
  JSON_TYPE,
  MIN_COMPRESSED_BYTES,
  negotiateEncoding,
  VARY,
} from '../http/answer.js';
import type { ClientAddress } from '../http/client-address.js';
import { noneMatchNames, representationTag } from '../http/conditional.js';
import { requestIdOf } from '../http/request-id.js';
import { MAX_COUNTER, MAX_PAGE_SIZE, OWNERS, type Owner } from '../schemas/common.js';

export interface MemoryReadsOptions {
  readonly answers: ReadAnswers;
  readonly authenticator: Authenticator;
  readonly limiter: AccessLimiter;
  readonly accessLog: AccessLog;
  readonly counts: AuthenticationCounts;
  readonly clientAddress: ClientAddress;
  readonly logger: FastifyBaseLogger;
  /** D32: where the answers of requests made with API keys are counted; nowhere when left out. */
  readonly usage?: KeyUsage;
  /** Whether the instance is draining: every request then goes the usual way, to be refused there. */
  readonly draining: () => boolean;
}

/** What a request's path and query name, once they are known to be what a read route takes. */
type Named = HeldRead;

const PREFIX = '/v3/playbook/';
const READ_SCOPE = 'playbook:read';
const DIGITS = /^[0-9]{1,16}$/;
const OWNER_SET: ReadonlySet<string> = new Set(OWNERS);

/**
 * The reads a busy service answers most, answered from memory before the framework's lifecycle
 * begins (D11, D19): a GET or HEAD of a read route, with an API key alone, whose answer memory holds
 * whole. Such a request does the least work the contract allows: the key verified from memory, the
 * request counted against its limits, the answer's bytes (or its compressed form, or a 304) written
 * with the headers every read sends, one access line and the request's metrics.
 *
 * It answers exactly what the routes would: the same key scheme (ReadAnswers), the same headers, the
 * same counts. Anything it is not sure of goes the usual way, untouched: another method, a credential
 * other than an API key alone, a query it does not read exactly as the routes' schemas do, a path it
 * does not know, an answer not held whole, a request past its limit (counted here, refused there with
 * the window it was counted in), a draining instance. `handle` returns false for those.
 */
export class MemoryReads {
  constructor(private readonly options: MemoryReadsOptions) {}

  /** Answers `request` from memory and returns true, or returns false and leaves it untouched. */
  handle(request: IncomingMessage, response: ServerResponse): boolean {
    const started = performance.now();
    const method = request.method;
    if (method !== 'GET' && method !== 'HEAD') return false;
    const url = request.url;
    if (url === undefined || !url.startsWith(PREFIX) || this.options.draining()) return false;
    const { headers } = request;
    // A body, a content coding, a missing Host or an Accept the API may not satisfy: the usual way
    // refuses or weighs them (request-pipeline.ts).
    if (headers['content-length'] !== undefined || headers['transfer-encoding'] !== undefined) return false;
    if (headers['content-encoding'] !== undefined) return false;
    if (headers.host === undefined && request.httpVersion !== '1.0') return false;
    if (!acceptable(headers.accept)) return false;
    const named = nameOf(url);
    if (named === undefined) return false;
    const principal = this.options.authenticator.authenticateFromMemory?.(headers, 'api-key-or-token');
    if (principal === undefined || !principal.scopes.has(READ_SCOPE)) return false;
    // D32: a key refused from this address is refused the usual way, which counts and says so.
    const { restrictions } = principal;
    if (
      restrictions?.allowedIps &&
      !addressAllowed(restrictions, this.options.clientAddress(request) ?? '')
    ) {
      return false;
    }
    const answer = this.answerOf(principal, named);
    if (answer === undefined) return false;
    this.options.counts.accepted.api_key.inc();
    const { limiter } = this.options;
    const counted = limiter.count?.(principal);
    if (counted instanceof Promise) {
      counted.then(
        (limits) => this.answerCounted(request, response, principal, named, answer, limits, started),
        // The counter is out of reach: the usual way counts again, and says what it found.
        () => this.handOver(request, response),
      );
      return true;
    }
    return this.answerCounted(request, response, principal, named, answer, counted, started);
  }

  /**
   * The answer memory holds for `named`, or a Resource's detail read at once from the read model
   * (SQLite); undefined for anything else, and for a refusal, which the usual way explains.
   */
  private answerOf(principal: Principal, named: Named): Answer | undefined {
    const { answers } = this.options;
    const held = answers.held(principal, named);
    if (held !== undefined || named.operation !== 'getPlaybookResource') return held;
    try {
      return answers.detailNow(principal, named.resourceId);
    } catch {
      return undefined;
    }
  }

  /**
   * What is done with a request that is not answered here after all. Set by the server once the
   * framework's handler exists (composition/app.ts).
   */
  handOver: (request: IncomingMessage, response: ServerResponse) => void = () => {
    throw new Error('a request handed over before the framework was ready');
  };

  private answerCounted(
    request: IncomingMessage,
    response: ServerResponse,
    principal: Principal,
    named: Named,
    answer: Answer,
    limits: CountedLimits | undefined,
    started: number,
  ): boolean {
    if (limits !== undefined && limits.exceeded.length > 0) {
      // Refused the usual way, with its problem document, in the windows it was counted in.
      (request as CountedRequest)[COUNTED_WINDOW] = limits;
      this.handOver(request, response);
      return true;
    }
    const encoding = answer.body.length >= MIN_COMPRESSED_BYTES ? encodingOf(request) : undefined;
    const body = encoding === undefined ? answer.body : answer.encoded(encoding);
    if (body instanceof Promise) {
      body.then(
        (bytes) => this.send(request, response, principal, named, answer, encoding, bytes, limits, started),
        () => this.handOver(request, response),
      );
    } else {
      this.send(request, response, principal, named, answer, encoding, body, limits, started);
    }
    return true;
  }

  private send(
    request: IncomingMessage,
    response: ServerResponse,
    principal: Principal,
    named: Named,
    answer: Answer,
    encoding: Encoding | undefined,
    body: Buffer,
    limits: CountedLimits | undefined,
    started: number,
  ): void {
    const requestId = requestIdOf(request);
    const etag = representationTag(answer.tag, encoding);
    const headers = ['x-request-id', requestId];
    if (limits !== undefined) headers.push(...rateLimitHeaders(limits.shown.limit, limits.shown));
    headers.push('cache-control', CACHE_CONTROL, 'vary', VARY, 'etag', etag);
    let status = 200;
    let bytes = 0;
    if (noneMatchNames(request.headers['if-none-match'], etag)) {
      status = 304;
      response.writeHead(304, headers);
      response.end();
    } else {
      headers.push('content-type', JSON_TYPE);
      if (encoding !== undefined) headers.push('content-encoding', encoding);
      bytes = body.length;
      headers.push('content-length', String(bytes));
      response.writeHead(200, headers);
      response.end(body);
    }
    const elapsedMs = performance.now() - started;
    const credential = principal.credential;
    const line: AccessLine = {
      reqId: requestId,
      op: named.operation,
      method: request.method!,
      url: redactUrl(request.url!),
      status,
      ms: accessMs(elapsedMs),
      bytes,
      client: this.options.clientAddress(request) ?? null,
    };
    if (credential.kind === 'api-key') {
      line.keyId = credential.keyId;
      // D32: counted in the key's usage as the hooks count it (request-pipeline.ts).
      this.options.usage?.count(credential.keyId, status, line.client ?? undefined);
    }
    line.account = principal.accountId;
    this.options.accessLog.write(this.options.logger, line, elapsedMs, true);
  }
}

/** Whether `Accept` allows a JSON answer; the common values are known without weighing them. */
function acceptable(accept: string | undefined): boolean {
  if (accept === undefined || accept === '*/*' || accept === 'application/json') return true;
  return answersAcceptable(accept);
}

function encodingOf(request: IncomingMessage): Encoding | undefined {
  return negotiateEncoding(request.headers['accept-encoding']);
}

/**
 * The read a URL names, when it names one exactly as the routes read it: the path of a read route
 * with values the answers' keys can hold, and a query of the parameters the route takes, each once,
 * in plain characters, integers in plain digits within their bounds. Ids are lowercased as the
 * routes do. Anything else is `undefined`, for the routes to answer (or refuse) the usual way.
 */
export function nameOf(url: string): Named | undefined {
  const mark = url.indexOf('?');
  const path = mark === -1 ? url : url.slice(0, mark);
  // Escapes are the router's to decode.
  if (path.includes('%')) return undefined;
  const parts = path.slice(PREFIX.length).split('/');
  const query = mark === -1 ? undefined : parseQuery(url.slice(mark + 1));
  if (query === null) return undefined;
  if (parts[0] === 'resources') {
    const resourceId = parts[1]?.toLowerCase();
    if (resourceId === undefined || resourceId === '') return undefined;
    if (parts.length === 2) return query ? undefined : { operation: 'getPlaybookResource', resourceId };
    if (parts[2] !== 'versions') return undefined;
    if (parts.length === 3) {
      const paging = pageQuery(query, []);
      return paging && { operation: 'listPlaybookResourceVersions', resourceId, query: paging.page };
    }
    const versionId = parts[3]?.toLowerCase();
    if (parts.length !== 4 || query || versionId === undefined || versionId === '') return undefined;
    return { operation: 'getPlaybookResourceVersion', resourceId, versionId };
  }
  if (parts[0] !== 'catalogs') return undefined;
  if (parts.length === 1) {
    const paging = pageQuery(query, ['sourceScope', 'capability']);
    if (!paging) return undefined;
    const { sourceScope, capability } = paging.rest;
    return {
      operation: 'listPlaybookCatalogs',
      query: {
        ...paging.page,
        ...(sourceScope === undefined
          ? {}
          : { sourceScope: sourceScope.split(',') as ('svc' | 'account')[] }),
        ...(capability === undefined ? {} : { capability }),
      },
    };
  }
  const owner = parts[1];
  const catalogSlug = parts[2];
  if (owner === undefined || !OWNER_SET.has(owner) || catalogSlug === undefined || catalogSlug === '') {
    return undefined;
  }
  const params = { owner: owner as Owner, catalogSlug };
  if (parts.length === 3) return query ? undefined : { operation: 'getPlaybookCatalog', params };
  if (parts[3] !== 'resources') return undefined;
  if (parts.length === 4) {
    const paging = pageQuery(query, ['kind']);
    if (!paging) return undefined;
    const { kind } = paging.rest;
    return {
      operation: 'listPlaybookCatalogResources',
      params,
      query: { ...paging.page, ...(kind === undefined ? {} : { kind: kind.split(',') as never[] }) },
    };
  }
  const resourceSlug = parts[4];
  if (parts.length !== 5 || query || resourceSlug === undefined || resourceSlug === '') return undefined;
  return { operation: 'getPlaybookResourceByRef', params: { ...params, resourceSlug } };
}

/**
 * A query string as a map of its parameters, each given once with a value in plain characters; null
 * for anything else (escapes, `+`, a parameter twice or without a value). Undefined when empty.
 */
function parseQuery(text: string): Map<string, string> | undefined | null {
  if (text === '') return null;
  if (text.includes('%') || text.includes('+')) return null;
  const query = new Map<string, string>();
  for (const pair of text.split('&')) {
    const equals = pair.indexOf('=');
    if (equals <= 0 || equals === pair.length - 1) return null;
    const name = pair.slice(0, equals);
    if (query.has(name)) return null;
    query.set(name, pair.slice(equals + 1));
  }
  return query;
}

/**
 * `page` and `pageSize` as decimal integers within their bounds, and the other parameters `names`
 * allows, as given; undefined when the query holds anything else.
 */
function pageQuery(
  query: Map<string, string> | undefined,
  names: readonly string[],
): { page: { page?: number; pageSize?: number }; rest: Record<string, string> } | undefined {
  const page: { page?: number; pageSize?: number } = {};
  const rest: Record<string, string> = {};
  for (const [name, value] of query ?? []) {
    if (name === 'page' || name === 'pageSize') {
      if (!DIGITS.test(value)) return undefined;
      const number = Number(value);
      if (number < 1 || number > (name === 'page' ? MAX_COUNTER : MAX_PAGE_SIZE)) return undefined;
      page[name] = number;
    } else if (names.includes(name)) {
      rest[name] = value;
    } else {
      return undefined;
    }
  }
  return { page, rest };
}
