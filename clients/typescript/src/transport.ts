import { PlaybookError, type ProblemField } from './errors.js';
import { fetchWithinOrigin } from './origins.js';

/** Per-call options, the last argument of every method. */
export interface CallOptions {
  /**
   * Ends the call at once when it aborts, in a request or in a wait between retries, and nothing is
   * retried after it: the call rejects with the signal's reason (a `DOMException` named `AbortError`
   * unless the signal was given another).
   */
  readonly signal?: AbortSignal;
  /**
   * Headers of this call alone, e.g. `x-request-id` (the service echoes a sane one, to find the call
   * in its logs) or `traceparent`. They may replace `user-agent` and `accept`. Headers that say who
   * calls or what the call is based on are the client's own: `x-api-key`, `authorization` and
   * `x-account-id` (given when the client is made), `if-match` and `if-none-match` (`ifMatch`,
   * `createOnly` and the cache) and `content-type`; naming one rejects the call with a `TypeError`
   * before anything is sent.
   */
  readonly headers?: Readonly<Record<string, string>>;
}

/** A representation kept for revalidation: its strong validator and its parsed body. */
export interface CachedAnswer {
  readonly etag: string;
  readonly body: unknown;
}

/**
 * Where the client keeps answers to revalidate with `If-None-Match`. Keys name the caller (by key id
 * or a digest of the token, never the secret), the account and the URL. Any store will do: a `Map`,
 * an LRU, a shared cache.
 */
export interface PlaybookCache {
  get(key: string): CachedAnswer | undefined;
  set(key: string, answer: CachedAnswer): void;
}

/** The default cache: the most recently used `maxEntries` answers, in memory. */
export class MemoryCache implements PlaybookCache {
  private readonly entries = new Map<string, CachedAnswer>();

  constructor(private readonly maxEntries = 1000) {}

  get(key: string): CachedAnswer | undefined {
    const answer = this.entries.get(key);
    if (answer) {
      this.entries.delete(key);
      this.entries.set(key, answer);
    }
    return answer;
  }

  set(key: string, answer: CachedAnswer): void {
    this.entries.delete(key);
    this.entries.set(key, answer);
    if (this.entries.size > this.maxEntries) this.entries.delete(this.entries.keys().next().value!);
  }
}

/** What one call's final answer said, for callers that watch their budget or log request ids. */
export interface ResponseInfo {
  readonly operation: string;
  readonly status: number;
  readonly requestId: string | undefined;
  readonly etag: string | undefined;
  /** Whether the body came from the cache after a 304. */
  readonly fromCache: boolean;
  /** Requests sent, retries included. */
  readonly attempts: number;
  readonly rateLimit:
    | { readonly limit: number; readonly remaining: number; readonly resetSeconds: number }
    | undefined;
}

export type QueryValue = string | number | boolean | readonly (string | number)[] | undefined;

export interface Call {
  readonly operation: string;
  readonly method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
  readonly path: string;
  readonly query?: Readonly<Record<string, QueryValue>> | undefined;
  readonly body?: unknown;
  /** Safe to send again after a failure whose outcome is unknown (a 5xx, a lost connection). */
  readonly idempotent: boolean;
  readonly signal?: AbortSignal | undefined;
  /** Request headers the client sets for this call (`If-Match`, `If-None-Match` of a write). */
  readonly headers?: Readonly<Record<string, string>> | undefined;
  /** Request headers the caller gave for this call: checked against `OWNED_HEADERS` first. */
  readonly callerHeaders?: Readonly<Record<string, string>> | undefined;
  /** How long one attempt may take, when not the client's `timeoutMs` (a request the service holds). */
  readonly timeoutMs?: number | undefined;
  /** Neither revalidated nor kept by the cache: an answer no later call asks for again. */
  readonly uncached?: boolean | undefined;
}

/**
 * Headers a caller may not set per call, and why: each says who is calling or what the call is based
 * on, and is set where the client decides it. A caller's value would be silently at odds with the
 * cache key (named by credential and account) or with the client's own preconditions, so it is
 * refused rather than merged.
 */
const OWNED_HEADERS: ReadonlyMap<string, string> = new Map([
  ['x-api-key', 'the credential is given once, as apiKey or accessToken when the client is made'],
  ['authorization', 'the credential is given once, as apiKey or accessToken when the client is made'],
  ['x-account-id', 'the account is given once, as accountId when the client is made'],
  ['if-match', "a write's precondition is its ifMatch option"],
  ['if-none-match', "reads revalidate through the client's cache; a write's createOnly option sets it"],
  ['content-type', 'bodies are always JSON'],
]);

/** A write's answer: its body and the written object's ETag, to send back in `If-Match`. */
export interface Written<T> {
  readonly data: T;
  readonly etag: string | undefined;
}

export interface TransportOptions {
  readonly baseUrl: string;
  /** Absent for the one operation that takes none: the development sign-in, which makes one. */
  readonly credential:
    | {
        readonly header: string;
        readonly value: string;
        readonly cacheName: () => Promise<string>;
      }
    | undefined;
  readonly accountId: string | undefined;
  readonly timeoutMs: number;
  readonly maxRetries: number;
  readonly retryBaseMs: number;
  readonly maxRetryDelayMs: number;
  readonly cache: PlaybookCache | undefined;
  readonly fetch: typeof fetch;
  readonly onResponse: ((info: ResponseInfo) => void) | undefined;
}

const USER_AGENT = 'playbook-client/0.1.0';

/**
 * Sends calls to the service: credentials, timeouts, retries with exponential backoff and full jitter
 * (honouring `Retry-After` and `RateLimit-Reset`), revalidation with `If-None-Match`, redirects
 * followed within the origin only, and every refusal turned into a {@link PlaybookError}.
 */
export class Transport {
  constructor(private readonly options: TransportOptions) {}

  async send<T>(call: Call): Promise<T> {
    return (await this.exchange<T>(call)).data;
  }

  /**
   * Sends `call` and returns the body with the answer's ETag. A body kept in the cache is frozen, to
   * its last nested value: every caller that gets it from the cache gets the same object.
   */
  async exchange<T>(call: Call): Promise<Written<T>> {
    // Before anything else: an aborted call sends nothing, and a refused header is said at once.
    call.signal?.throwIfAborted();
    const { options } = this;
    const headers = callerHeaders(call.callerHeaders);
    if (options.credential) headers.set(options.credential.header, options.credential.value);
    if (options.accountId !== undefined) headers.set('x-account-id', options.accountId);
    if (call.body !== undefined) headers.set('content-type', 'application/json');
    for (const [name, value] of Object.entries(call.headers ?? {})) headers.set(name, value);
    const url = this.url(call);
    const cacheKey =
      options.cache && options.credential && call.method === 'GET' && !call.uncached
        ? `${await options.credential!.cacheName()} ${options.accountId ?? ''} ${url}`
        : undefined;
    const cached = cacheKey === undefined ? undefined : options.cache!.get(cacheKey);
    if (cached) headers.set('if-none-match', cached.etag);

    for (let attempt = 1; ; attempt++) {
      let failure: PlaybookError;
      let waitMs: number | undefined;
      const timeoutMs = call.timeoutMs ?? options.timeoutMs;
      const timeout = AbortSignal.timeout(timeoutMs);
      const signal = call.signal ? AbortSignal.any([call.signal, timeout]) : timeout;
      try {
        const response = await fetchWithinOrigin(options.fetch, url, {
          method: call.method,
          headers,
          ...(call.body === undefined ? {} : { body: JSON.stringify(call.body) }),
          signal,
        });
        const info = (fromCache: boolean): ResponseInfo =>
          describe(call.operation, response, fromCache, attempt);
        if (response.status === 304 && cached) {
          options.onResponse?.(info(true));
          // A store of the caller's own may hand out what it holds unfrozen.
          return { data: deepFreeze(cached.body) as T, etag: cached.etag };
        }
        const text = await response.text();
        if (response.ok) {
          let body = text === '' ? undefined : parseJson(text, response);
          const etag = response.headers.get('etag');
          if (cacheKey !== undefined && etag) {
            body = deepFreeze(body);
            options.cache!.set(cacheKey, { etag, body });
          }
          options.onResponse?.(info(false));
          return { data: body as T, etag: etag ?? undefined };
        }
        failure = problemOf(response, text);
        const retryable =
          response.status === 429 || (call.idempotent && response.status >= 500 && response.status !== 501);
        if (!retryable) throw failure;
        waitMs = serverWaitMs(response);
      } catch (error) {
        if (call.signal?.aborted) throw call.signal.reason;
        if (error instanceof PlaybookError) throw error;
        // No answer: the connection failed or the attempt ran out of time.
        const timedOut = timeout.aborted;
        failure = new PlaybookError({
          status: 0,
          code: timedOut ? 'timeout' : 'network_error',
          title: timedOut ? 'Timeout' : 'Network error',
          detail: timedOut
            ? `no answer within ${timeoutMs} ms`
            : `the request did not reach the service (${(error as Error).message})`,
          cause: error,
        });
        if (!call.idempotent) throw failure;
      }
      if (attempt > options.maxRetries) throw failure;
      if (waitMs !== undefined && waitMs > options.maxRetryDelayMs) throw failure;
      await sleep(waitMs ?? this.backoffMs(attempt), call.signal);
    }
  }

  /**
   * Full jitter: anywhere between zero and the exponential ceiling, so that clients spread out. Also
   * the pause of a caller that goes on after a call failed for good (`sync.follow`).
   */
  backoffMs(attempt: number): number {
    const ceiling = Math.min(this.options.maxRetryDelayMs, this.options.retryBaseMs * 2 ** (attempt - 1));
    return Math.random() * ceiling;
  }

  private url(call: Call): string {
    const url = new URL(call.path, this.options.baseUrl);
    for (const [name, value] of Object.entries(call.query ?? {})) {
      if (value === undefined) continue;
      url.searchParams.set(name, Array.isArray(value) ? value.join(',') : String(value));
    }
    return url.toString();
  }
}

/** The caller's headers of one call, checked: a malformed one or one the client owns is a TypeError. */
function callerHeaders(given: Readonly<Record<string, string>> | undefined): Headers {
  const headers = new Headers({ accept: 'application/json', 'user-agent': USER_AGENT });
  // Checked by the platform first: a bad name or value is refused here rather than as a lost request.
  for (const [name, value] of new Headers(given ?? {})) {
    const owned = OWNED_HEADERS.get(name);
    if (owned !== undefined) throw new TypeError(`Playbook: a call's headers may not set ${name}: ${owned}`);
    headers.set(name, value);
  }
  return headers;
}

/**
 * Freezes a parsed JSON value and every value inside it, so that no caller can change what the cache
 * hands to the next. Children are frozen before their parent, so a frozen object met again (an answer
 * kept by this client) is known to be frozen throughout and is not walked twice.
 */
function deepFreeze<T>(value: T): T {
  if (typeof value !== 'object' || value === null || Object.isFrozen(value)) return value;
  for (const child of Object.values(value)) deepFreeze(child);
  return Object.freeze(value);
}

function parseJson(text: string, response: Response): unknown {
  try {
    return JSON.parse(text);
  } catch {
    throw new PlaybookError({
      status: response.status,
      code: 'invalid_response',
      title: 'Invalid response',
      detail: 'the answer is not JSON',
      ...requestIdOf(response),
    });
  }
}

function requestIdOf(response: Response): { requestId?: string } {
  const requestId = response.headers.get('x-request-id');
  return requestId ? { requestId } : {};
}

/** The problem document of a refusal, or what can be said of an answer that is not one. */
function problemOf(response: Response, text: string): PlaybookError {
  const retryAfter = seconds(response.headers.get('retry-after'));
  let problem: Record<string, unknown> = {};
  try {
    problem = JSON.parse(text) as Record<string, unknown>;
  } catch {
    // A proxy's HTML page, or nothing: described by its status below.
  }
  const text200 = (value: unknown, fallback: string) => (typeof value === 'string' ? value : fallback);
  return new PlaybookError({
    status: response.status,
    code: text200(problem.code, `http_${response.status}`),
    title: text200(problem.title, response.statusText || `HTTP ${response.status}`),
    detail: text200(problem.detail, `the service answered ${response.status}`),
    ...(typeof problem.requestId === 'string' ? { requestId: problem.requestId } : requestIdOf(response)),
    ...(Array.isArray(problem.errors) ? { errors: problem.errors as ProblemField[] } : {}),
    ...(retryAfter === undefined ? {} : { retryAfter }),
  });
}

/** How long the service asked to wait: `Retry-After`, else on a 429 when the window resets. */
function serverWaitMs(response: Response): number | undefined {
  const retryAfter = seconds(response.headers.get('retry-after'));
  if (retryAfter !== undefined) return retryAfter * 1000;
  if (response.status !== 429) return undefined;
  const reset = seconds(response.headers.get('ratelimit-reset'));
  return reset === undefined ? undefined : reset * 1000;
}

/** Seconds from `Retry-After`-style text: a number of seconds or an HTTP date. */
function seconds(value: string | null): number | undefined {
  if (value === null || value.trim() === '') return undefined;
  if (/^\d+$/.test(value.trim())) return Number(value.trim());
  const at = Date.parse(value);
  return Number.isNaN(at) ? undefined : Math.max(0, Math.ceil((at - Date.now()) / 1000));
}

function describe(operation: string, response: Response, fromCache: boolean, attempts: number): ResponseInfo {
  const limit = seconds(response.headers.get('ratelimit-limit'));
  const remaining = seconds(response.headers.get('ratelimit-remaining'));
  const reset = seconds(response.headers.get('ratelimit-reset'));
  return {
    operation,
    status: response.status,
    requestId: response.headers.get('x-request-id') ?? undefined,
    etag: response.headers.get('etag') ?? undefined,
    fromCache,
    attempts,
    rateLimit:
      limit === undefined || remaining === undefined || reset === undefined
        ? undefined
        : { limit, remaining, resetSeconds: reset },
  };
}

/** Waits, unless the caller gives up first. */
export function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', abort);
      resolve();
    }, ms);
    const abort = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    signal?.addEventListener('abort', abort, { once: true });
  });
}
