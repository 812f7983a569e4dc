import type { IncomingHttpHeaders } from 'node:http';
import type { FastifyRequest } from 'fastify';
import type { AccountPlans } from '../accounts/account-plans.js';
import { DEFAULT_PLAN } from '../accounts/accounts.js';
import { AuthenticationError, ForbiddenError, InputError } from '../foundation/errors.js';
import { looksLikeApiKey } from '../schemas/api-key-format.js';
import type { Scope } from '../schemas/identity.js';
import type { AccessTokenVerifier, TokenKeys } from './access-tokens.js';
import type { ApiKeyVerifier, VerifiedApiKey } from './api-key-verifier.js';
import type { Authenticator, CredentialPolicy } from './authenticator.js';
import type { CredentialCheck, Principal } from './principal.js';

/** What an access token may do on the reads (D7): read, nothing else. */
// D23: a user acts with both scopes; keys carry what they were given.
const TOKEN_SCOPES: ReadonlySet<Scope> = new Set<Scope>(['playbook:read', 'playbook:write']);
const BEARER = /^Bearer +(\S+)$/i;

/**
 * A credential header, refused when it is sent twice (D21): Node keeps the first `Authorization` and
 * joins repeated `x-api-key` values, so neither would say which one the caller meant.
 */
function header(
  request: FastifyRequest,
  name: 'x-api-key' | 'authorization' | 'x-account-id',
): string | undefined {
  const value = request.headers[name];
  if (value === undefined) return undefined;
  const raw = request.raw.rawHeaders;
  let seen = 0;
  for (let i = 0; i < raw.length; i += 2)
    if (raw[i]!.length === name.length && raw[i]!.toLowerCase() === name) seen++;
  if (seen > 1) throw InputError.of('header', name, 'must be sent once');
  return Array.isArray(value) ? value.join(', ') : value;
}

function principalOf(key: VerifiedApiKey): Principal {
  return {
    accountId: key.accountId,
    plan: key.plan,
    scopes: key.scopes,
    credential: { kind: 'api-key', keyId: key.keyId },
    restrictions: key.restrictions,
  };
}

/**
 * The service's authenticator: `x-api-key` or `Authorization: Bearer` on the reads, a bearer access
 * token only on key management (an API key there is a 401).
 *
 * A request that sends both headers is refused with 400, whatever the route: choosing one silently
 * would let a caller believe the other was checked, and a misconfigured client should learn it at once.
 */
export class CredentialAuthenticator implements Authenticator, CredentialCheck {
  constructor(
    private readonly keys: ApiKeyVerifier,
    private readonly tokens: AccessTokenVerifier,
    private readonly plans: AccountPlans,
  ) {}

  get tokenKeys(): TokenKeys {
    return this.tokens.keys;
  }

  async authenticate(request: FastifyRequest, policy: CredentialPolicy): Promise<Principal> {
    const apiKey = header(request, 'x-api-key');
    const authorization = header(request, 'authorization');
    if (apiKey !== undefined && authorization !== undefined) {
      throw InputError.of('header', 'x-api-key', 'send one credential: x-api-key or Authorization, not both');
    }
    if (policy === 'access-token') {
      if (apiKey !== undefined) {
        throw new AuthenticationError(
          'this operation needs a user access token (Authorization: Bearer); API keys are not accepted',
          'missing',
        );
      }
      if (authorization === undefined) {
        throw new AuthenticationError(
          'an access token is required: Authorization: Bearer <token>',
          'missing',
        );
      }
      return this.fromToken(request, authorization);
    }
    if (apiKey !== undefined) return this.fromApiKey(request, apiKey);
    if (authorization !== undefined) return this.fromToken(request, authorization);
    throw new AuthenticationError(
      'a credential is required: x-api-key, or Authorization: Bearer <token>',
      'missing',
    );
  }

  /**
   * The principal of the common case, decided without a promise: an API key alone (no Authorization,
   * no x-account-id) that the verifier holds in memory. Anything else is `undefined`, for
   * `authenticate` to decide and to explain. A repeated x-api-key arrives joined by a comma, which no
   * key parses as, so it goes there too.
   */
  authenticateFromMemory(headers: IncomingHttpHeaders, policy: CredentialPolicy): Principal | undefined {
    const presented = headers['x-api-key'];
    if (policy !== 'api-key-or-token' || typeof presented !== 'string') return undefined;
    if (headers.authorization !== undefined || headers['x-account-id'] !== undefined) return undefined;
    const key = this.keys.verifyFromMemory(presented);
    return key && principalOf(key);
  }

  /**
   * Whether the credential a principal was made from is still accepted (D27: before a held request
   * answers): a key revoked, rolled past its overlap or expired since, or a token expired since, is
   * refused as a new request with it would be. Neither is read from storage while memory can tell.
   */
  async recheck(principal: Principal): Promise<void> {
    const { credential } = principal;
    if (credential.kind === 'api-key') await this.keys.recheck(credential.keyId);
    else this.tokens.checkNotExpired(credential.expiresAt);
  }

  private async fromApiKey(request: FastifyRequest, presented: string): Promise<Principal> {
    const key = await this.keys.verify(presented);
    const selected = header(request, 'x-account-id');
    // A key belongs to one account (D8): naming another is asking for access it does not have.
    if (selected !== undefined && selected !== key.accountId) {
      throw new ForbiddenError('this API key does not act for the account in x-account-id');
    }
    return principalOf(key);
  }

  private async fromToken(request: FastifyRequest, authorization: string): Promise<Principal> {
    const token = BEARER.exec(authorization.trim())?.[1];
    if (token === undefined) {
      throw new AuthenticationError('the Authorization header must be "Bearer <access token>"', 'malformed');
    }
    // An API key sent as a bearer token is a common slip: say where it goes, never echo it.
    if (looksLikeApiKey(token)) {
      throw new AuthenticationError(
        'the access token is malformed: this looks like an API key, which goes in the x-api-key header, not Authorization: Bearer',
        'malformed',
      );
    }
    const { subject, accounts, expiresAt } = await this.tokens.verify(token);
    const selected = header(request, 'x-account-id');
    if (selected !== undefined && !accounts.includes(selected)) {
      throw new ForbiddenError('the access token does not let this user act for the account in x-account-id');
    }
    // D9: the chosen account, else the user's only account, else none (service-owned content only).
    const accountId = selected ?? (accounts.length === 1 ? accounts[0]! : null);
    return {
      accountId,
      plan: accountId === null ? DEFAULT_PLAN : await this.plans.planOf(accountId),
      scopes: TOKEN_SCOPES,
      credential: { kind: 'access-token', subject, accounts, expiresAt },
      restrictions: null,
    };
  }
}
