/**
 * The small set of errors the service raises. They know nothing of HTTP: `src/http/problem.ts` maps
 * each to a problem document (D2) at the one edge where answers are made. The reasons they carry
 * are codes of that document, taken from its one list (`ProblemCode`).
 */
import type { ProblemCode } from '../schemas/common.js';

/** Where a bad input was found, as the problem document's `errors[].in` names it. */
export type InputLocation = 'query' | 'path' | 'body' | 'header';

export interface InputProblem {
  readonly in: InputLocation;
  readonly name: string;
  readonly message: string;
}

/** The request is invalid: every problem found is listed, each naming its field. */
export class InputError extends Error {
  override name = 'InputError';
  /**
   * @param stoppedEarly checking stopped before the end of the input (D20: at the 21st problem), so
   *   more problems may follow the ones listed.
   */
  constructor(
    readonly problems: readonly InputProblem[],
    readonly stoppedEarly = false,
  ) {
    super(problems.map((p) => `${p.in} ${p.name}: ${p.message}`).join('; '));
  }

  static of(location: InputLocation, name: string, message: string): InputError {
    return new InputError([{ in: location, name, message }]);
  }
}

/** A request larger than the deployment takes (D20: more Resources than one publish may hold). */
export class ContentTooLargeError extends Error {
  override name = 'ContentTooLargeError';
}

/** A request body in a media type the operation does not take: JSON (UTF-8) only (D29). */
export class UnsupportedMediaTypeError extends Error {
  override name = 'UnsupportedMediaTypeError';
}

/** A request whose `Accept` rules out every media type the answer could have (D29). */
export class NotAcceptableError extends Error {
  override name = 'NotAcceptableError';
}

/** A valid request that would take an account past a limit of the deployment (D20). */
export class LimitError extends Error {
  override name = 'LimitError';
}

/**
 * A valid request that the current state of what it names forbids (D22: rolling a revoked key; D15: a
 * version label over other content; D28: sending to a disabled webhook endpoint), with the fields at
 * fault when there are some.
 */
export class ConflictError extends Error {
  override name = 'ConflictError';
  constructor(
    message: string,
    readonly reason: Extract<
      ProblemCode,
      'key_inactive' | 'key_already_rolled' | 'version_label_taken' | 'endpoint_disabled'
    >,
    readonly problems: readonly InputProblem[] = [],
  ) {
    super(message);
  }
}

/** A key that has a successor already: a key is rolled once (D29), and the answer names the successor. */
export class KeyAlreadyRolledError extends ConflictError {
  override name = 'KeyAlreadyRolledError';
  constructor(readonly replacedBy: string) {
    super(
      `the API key was already rolled: key ${replacedBy} replaced it; roll that key, or revoke it and create a new one`,
      'key_already_rolled',
    );
  }
}

/** A write whose `If-Match` or `If-None-Match` no longer holds (D23). */
export class PreconditionFailedError extends Error {
  override name = 'PreconditionFailedError';
}

/**
 * A sync position that cannot be used (D27): `invalid_sync_token` for one the service did not make for
 * this caller (forged, damaged, another account's, or a page position given as a sync position);
 * `sync_token_expired` for one the change log no longer reaches, or made for a view that has changed
 * since: the follower starts over with an initial sync.
 */
export class SyncTokenError extends Error {
  override name = 'SyncTokenError';
  constructor(
    message: string,
    readonly reason: Extract<ProblemCode, 'invalid_sync_token' | 'sync_token_expired'>,
    /** The query parameter that carried it. */
    readonly parameter: 'syncToken' | 'pageToken',
  ) {
    super(message);
  }
}

/** An operation this deployment is not set up for (D22: leak reports without a key list). */
export class NotConfiguredError extends Error {
  override name = 'NotConfiguredError';
}

/** Why a credential was refused, in one word of a fixed set: a metric's label, never the message. */
export type RefusalReason =
  | 'missing'
  | 'malformed'
  | 'invalid'
  | 'expired'
  | 'revoked'
  | 'environment'
  | 'claims';

/** No credential, or one that is malformed, unknown, expired, revoked or of the other environment. */
export class AuthenticationError extends Error {
  override name = 'AuthenticationError';
  constructor(
    message: string,
    readonly reason: RefusalReason,
    /**
     * The API key refused, when its id is one that exists (a wrong secret, a revoked or expired key):
     * its usage counts the refusal (D32). Never said to the caller.
     */
    readonly keyId?: string,
  ) {
    super(message);
  }
}

/**
 * A valid credential that lacks the scope, account or plan the operation needs, or that is sent from
 * an address its key does not take (D32).
 */
export class ForbiddenError extends Error {
  override name = 'ForbiddenError';
  constructor(
    message: string,
    readonly reason: Extract<ProblemCode, 'forbidden' | 'plan_required' | 'ip_not_allowed'> = 'forbidden',
  ) {
    super(message);
  }
}

/** Missing, or not visible to the caller: the two are answered alike (D5). */
export class NotFoundError extends Error {
  override name = 'NotFoundError';
}

/** A known path, asked with a method it does not take (D2). */
export class MethodNotAllowedError extends Error {
  override name = 'MethodNotAllowedError';
  constructor(
    method: string,
    readonly allowed: readonly string[],
  ) {
    super(`${method} is not an operation of this path; it takes ${allowed.join(', ')}`);
  }
}

/** Too many requests for one credential or address in the current window (D10). */
export class RateLimitError extends Error {
  override name = 'RateLimitError';
  constructor(
    message: string,
    readonly retryAfterSeconds: number,
  ) {
    super(message);
  }
}

/** A backend the request needs (database, content store) does not answer right now. */
export class UnavailableError extends Error {
  override name = 'UnavailableError';
  /** When to try again (`Retry-After`). */
  readonly retryAfterSeconds: number;

  constructor(message: string, options: { cause?: unknown; retryAfterSeconds?: number } = {}) {
    super(message, options.cause === undefined ? {} : { cause: options.cause });
    this.retryAfterSeconds = options.retryAfterSeconds ?? 1;
  }
}

/**
 * A write that met other writes of the same data on every attempt: nothing was written, and the
 * caller may try again shortly. Its message is safe to show.
 */
export class WriteContentionError extends UnavailableError {
  override name = 'WriteContentionError';
}

/**
 * This instance holds as much of some kind of work as it may (D27: requests held waiting for a
 * change): the caller tries again after `Retry-After`. Its message is safe to show.
 */
export class CapacityError extends UnavailableError {
  override name = 'CapacityError';
}

/** Stored content that no longer matches its hash: logged, never served (D12). */
export class IntegrityError extends Error {
  override name = 'IntegrityError';
}
