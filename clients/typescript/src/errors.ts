/** One problem of a 400, naming the field: `{ in: 'query', name: 'pageSize', message: '…' }`. */
export interface ProblemField {
  readonly in: 'query' | 'path' | 'body' | 'header';
  readonly name: string;
  readonly message: string;
}

/** What the service answered (an RFC 9457 problem document), or what happened on the way. */
export interface PlaybookErrorInit {
  /** The HTTP status; 0 when no answer came (a network failure or a timeout). */
  readonly status: number;
  /**
   * The problem's stable code (`not_found`, `rate_limited`…), or `network_error` / `timeout`, or
   * `redirect_refused` (a redirect to another origin or to plain http, never followed).
   */
  readonly code: string;
  readonly title: string;
  readonly detail: string;
  /** The answer's `x-request-id`: give it to the operators to find the request in their logs. */
  readonly requestId?: string;
  readonly errors?: readonly ProblemField[];
  /** Seconds the service asked to wait (`Retry-After`), when it did. */
  readonly retryAfter?: number;
  readonly cause?: unknown;
}

/** Marks an error made by this class in any build of the package (a registered symbol is shared). */
const BRAND = Symbol.for('@playbook/client/PlaybookError');

/**
 * The one error the client throws, for refusals of the service and for failures on the way. Its
 * message names the status, code, detail and request id, and never a credential.
 *
 * @example
 * try { await playbook.resources.get(id); }
 * catch (error) { if (error instanceof PlaybookError && error.status === 404) … }
 */
export class PlaybookError extends Error {
  override name = 'PlaybookError';
  readonly status: number;
  readonly code: string;
  readonly title: string;
  readonly detail: string;
  readonly requestId: string | undefined;
  readonly errors: readonly ProblemField[];
  readonly retryAfter: number | undefined;

  constructor(init: PlaybookErrorInit) {
    const where = init.requestId ? ` (request ${init.requestId})` : '';
    const fields = init.errors?.length
      ? `: ${init.errors.map((e) => `${e.in} ${e.name} ${e.message}`).join('; ')}`
      : '';
    super(
      `${init.status || 'no answer'} ${init.code}: ${init.detail}${fields}${where}`,
      init.cause === undefined ? undefined : { cause: init.cause },
    );
    this.status = init.status;
    this.code = init.code;
    this.title = init.title;
    this.detail = init.detail;
    this.requestId = init.requestId;
    this.errors = init.errors ?? [];
    this.retryAfter = init.retryAfter;
    Object.defineProperty(this, BRAND, { value: true });
  }
}

/**
 * `instanceof PlaybookError` holds for an error of either build of this package: a program whose parts
 * `import` and `require` it loads both, and each build has a class of its own. A subclass keeps the
 * usual test.
 */
Object.defineProperty(PlaybookError, Symbol.hasInstance, {
  value(this: unknown, value: unknown): boolean {
    return (
      Function.prototype[Symbol.hasInstance].call(this, value) ||
      (this === PlaybookError &&
        typeof value === 'object' &&
        value !== null &&
        (value as { [BRAND]?: unknown })[BRAND] === true)
    );
  },
});
