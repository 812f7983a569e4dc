import type { IncomingHttpHeaders } from 'node:http';
import type {
  FastifyContextConfig,
  FastifyReply,
  FastifyRequest,
  onRequestHookHandler,
  onResponseHookHandler,
} from 'fastify';
import { AuthenticationError, ForbiddenError, RateLimitError } from '../foundation/errors.js';
import type { CountedSeries, Metrics } from '../observability/metrics.js';
import type { Scope } from '../schemas/identity.js';
import type { TokenKeys } from './access-tokens.js';
import { addressAllowed } from './key-restrictions.js';
import type { Principal } from './principal.js';
import type { AccessLimiter } from './rate-limits.js';
import type { KeyUsage } from './usage-recorder.js';

/** Which credentials a route takes: the reads take either; key management only an access token (D8). */
export type CredentialPolicy = 'api-key-or-token' | 'access-token';

/** Turns a request's credential into a principal, or throws `AuthenticationError` / `ForbiddenError`. */
export interface Authenticator {
  authenticate(request: FastifyRequest, policy: CredentialPolicy): Promise<Principal>;
  /**
   * The principal of a request with these headers, when it can be told at once from what is held in
   * memory; `undefined` leaves the request to `authenticate`, which also explains every refusal.
   */
  authenticateFromMemory?(headers: IncomingHttpHeaders, policy: CredentialPolicy): Principal | undefined;
  /**
   * Where the keys that sign access tokens come from, as the API's documentation describes them;
   * the embedded signer's when not said.
   */
  readonly tokenKeys?: TokenKeys;
}

declare module 'fastify' {
  interface FastifyRequest {
    /** Set by the auth hook on every route that declares `config.auth`; null elsewhere. */
    principal: Principal | null;
  }
  interface FastifyContextConfig {
    /** The credential a route needs and, for the reads, the scope it needs (D7). */
    auth?: { readonly policy: CredentialPolicy; readonly scope?: Scope };
  }
}

/**
 * Each route states its needs in one line of `config`; this hook, bound to each route that states
 * them when the route is added, enforces them before validation, in this order: authentication, the
 * per-credential rate limit (so a 403 counts and carries the headers too), then the scope; a key
 * restricted to some addresses (D32) is refused first from any other. Routes
 * that take no credential (health, readiness, the OpenAPI document, the docs, unknown paths) are
 * neither authenticated nor counted (D10).
 *
 * A refused credential counts against its address (D10): past the address's budget, it is answered 429
 * rather than 401. The failure limit only ever refuses failures, so a valid credential sent from the
 * same address (a NAT, a load balancer) is never locked out by someone else's bad ones.
 */
export function authHook(
  authenticator: Authenticator,
  limiter: AccessLimiter,
  needs: NonNullable<FastifyContextConfig['auth']>,
  counts: AuthenticationCounts,
  usage?: KeyUsage,
): onRequestHookHandler {
  const admit = (
    request: FastifyRequest,
    reply: FastifyReply,
    principal: Principal,
  ): void | Promise<void> => {
    if (!addressAllowed(principal.restrictions, request.ip)) {
      return refuseAddress(request, reply, principal);
    }
    counts.accepted[KIND_OF[principal.credential.kind]].inc();
    request.principal = principal;
    const counted = limiter.consume(request, reply);
    return counted instanceof Promise ? counted.then(() => checkScope(principal)) : checkScope(principal);
  };
  /**
   * D32: a key sent from an address its `allowedIps` do not hold is refused with 403, named neither
   * list nor address. The refusal counts against the address as a failed authentication does (D10),
   * not against the key: whoever holds a leaked key elsewhere cannot use up its budget.
   */
  const refuseAddress = async (
    request: FastifyRequest,
    reply: FastifyReply,
    principal: Principal,
  ): Promise<void> => {
    counts.metrics.authentications.inc({ kind: 'api_key', outcome: 'refused', reason: 'address' });
    await countedFailure(request, reply, keyIdOf(principal));
    // The access line names the key refused, and its usage counts the refusal with where it came from.
    request.principal = principal;
    throw new ForbiddenError(
      'this API key is not accepted from the address of this request',
      'ip_not_allowed',
    );
  };
  const checkScope = (principal: Principal): void => {
    if (needs.scope && !principal.scopes.has(needs.scope)) {
      throw new ForbiddenError(`this operation needs the ${needs.scope} scope`);
    }
  };
  const authenticate = async (request: FastifyRequest, reply: FastifyReply): Promise<void> => {
    let principal: Principal;
    try {
      principal = await authenticator.authenticate(request, needs.policy);
    } catch (error) {
      if (error instanceof AuthenticationError) {
        counts.metrics.authentications.inc({
          kind: credentialKind(request),
          outcome: 'refused',
          reason: error.reason,
        });
        await countedFailure(request, reply, error.keyId);
        // D32: a refusal of a key id that exists counts in that key's usage.
        if (error.keyId !== undefined) usage?.count(error.keyId, 401);
      }
      throw error;
    }
    await admit(request, reply, principal);
  };
  /** A failed authentication counted against the address; a 429 past its budget counts in the key's usage. */
  const countedFailure = async (
    request: FastifyRequest,
    reply: FastifyReply,
    keyId: string | undefined,
  ): Promise<void> => {
    try {
      await limiter.recordFailure(request, reply);
    } catch (error) {
      if (error instanceof RateLimitError && keyId !== undefined) usage?.count(keyId, 429);
      throw error;
    }
  };
  // A key held in memory, counted in memory, is admitted without a promise: the common case of a busy
  // service, where each promise would be a measurable part of the request.
  return (request, reply, done) => {
    let admitted: void | Promise<void>;
    try {
      const known = authenticator.authenticateFromMemory?.(request.headers, needs.policy);
      admitted = known ? admit(request, reply, known) : authenticate(request, reply);
    } catch (error) {
      done(error as Error);
      return;
    }
    if (admitted instanceof Promise) admitted.then(() => done(), done);
    else done();
  };
}

/** The key a principal was made from, if any. */
function keyIdOf(principal: Principal): string | undefined {
  return principal.credential.kind === 'api-key' ? principal.credential.keyId : undefined;
}

/**
 * D32: counts each answer of a request made with an API key in the key's usage, once it is sent, with
 * the request's client address as the key's last use. Bound to every route that takes a credential,
 * beside `authHook`; a request with an access token, or refused before its key was known, counts here
 * for nothing (`authHook` counts the refusals of key ids that exist).
 */
export function usageHook(usage: KeyUsage): onResponseHookHandler {
  return (request, reply, done) => {
    const credential = request.principal?.credential;
    if (credential?.kind === 'api-key') usage.count(credential.keyId, reply.statusCode, request.ip);
    done();
  };
}

/** How authentications are counted (D25): accepted ones through series bound once, refusals as they come. */
export interface AuthenticationCounts {
  readonly metrics: Metrics;
  readonly accepted: Record<'api_key' | 'access_token', CountedSeries<'kind' | 'outcome' | 'reason'>>;
}

/** The series of accepted credentials, bound once per app: the common case costs one increment. */
export function authenticationCounts(metrics: Metrics): AuthenticationCounts {
  return {
    metrics,
    accepted: {
      api_key: metrics.authentications.bind({ kind: 'api_key', outcome: 'accepted', reason: '' }),
      access_token: metrics.authentications.bind({ kind: 'access_token', outcome: 'accepted', reason: '' }),
    },
  };
}

const KIND_OF = { 'api-key': 'api_key', 'access-token': 'access_token' } as const;

/** Which credential a request presented, for the metrics (D25). */
function credentialKind(request: FastifyRequest): 'api_key' | 'access_token' | 'none' {
  if (request.headers['x-api-key'] !== undefined) return 'api_key';
  return request.headers.authorization === undefined ? 'none' : 'access_token';
}
