import type { FastifyReply, FastifyRequest } from 'fastify';
import { AuthenticationError, ForbiddenError } from '../errors.js';
import type { Principal, Scope } from './principal.js';
import type { AccessLimiter } from './rate-limits.js';

/** Which credentials a route takes: the reads take either; key management only an access token (D8). */
export type CredentialPolicy = 'api-key-or-token' | 'access-token';

/** Turns a request's credential into a principal, or throws `AuthenticationError` / `ForbiddenError`. */
export interface Authenticator {
  authenticate(request: FastifyRequest, policy: CredentialPolicy): Promise<Principal>;
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
 * Each route states its needs in one line of `config`; this hook enforces them before validation, in
 * this order: the per-address failure limit (before any credential work), authentication, the
 * per-credential rate limit (so a 403 counts and carries the headers too), then the scope.
 */
export function authHook(authenticator: Authenticator, limiter?: AccessLimiter) {
  return async (request: FastifyRequest, reply: FastifyReply): Promise<void> => {
    const needs = request.routeOptions.config.auth;
    if (!needs) {
      await limiter?.consume(request, reply);
      return;
    }
    await limiter?.admit(request, reply);
    let principal: Principal;
    try {
      principal = await authenticator.authenticate(request, needs.policy);
    } catch (error) {
      if (error instanceof AuthenticationError) await limiter?.recordFailure(request, reply);
      else await limiter?.consume(request, reply);
      throw error;
    }
    request.principal = principal;
    await limiter?.consume(request, reply);
    if (needs.scope && !principal.scopes.has(needs.scope)) {
      throw new ForbiddenError(`this operation needs the ${needs.scope} scope`);
    }
  };
}
