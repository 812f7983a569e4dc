import type { FastifyRequest } from 'fastify';
import { ForbiddenError } from '../errors.js';
import type { Principal, Scope } from './principal.js';

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

/** Each route states its needs in one line of `config`; this hook enforces them before validation. */
export function authHook(authenticator: Authenticator) {
  return async (request: FastifyRequest): Promise<void> => {
    const needs = request.routeOptions.config.auth;
    if (!needs) return;
    const principal = await authenticator.authenticate(request, needs.policy);
    request.principal = principal;
    if (needs.scope && !principal.scopes.has(needs.scope)) {
      throw new ForbiddenError(`this operation needs the ${needs.scope} scope`);
    }
  };
}
