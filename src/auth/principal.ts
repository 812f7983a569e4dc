import type { Scope } from '../schemas/identity.js';
import type { Restrictions } from './key-restrictions.js';

export type Credential =
  | { readonly kind: 'api-key'; readonly keyId: string }
  | {
      readonly kind: 'access-token';
      /** The user (`sub`). */
      readonly subject: string;
      /** Every account the token lets the user act for (D9), whichever one this request selected. */
      readonly accounts: readonly string[];
      /** The token's `exp`, in seconds since the epoch: a request held past it is refused (D27). */
      readonly expiresAt: number;
    };

/**
 * Who is calling, as the authentication hook resolved it: the account whose data is visible (none
 * means service-owned content only), that account's plan, and the scopes granted.
 */
export interface Principal {
  readonly accountId: string | null;
  readonly plan: string;
  readonly scopes: ReadonlySet<Scope>;
  readonly credential: Credential;
  /**
   * D32: what the key is limited to, canonical and compiled once per key read; null for a key without
   * restrictions and for every access token, so that an unrestricted request checks one null.
   */
  readonly restrictions: Restrictions | null;
}

/**
 * One word per credential, whichever request presents it: a key by its id, a token by its user (D10,
 * D27). Key ids and subjects never collide with each other, nor with the addresses rate limits count.
 */
export function credentialKey(credential: Credential): string {
  return credential.kind === 'api-key' ? `key:${credential.keyId}` : `user:${credential.subject}`;
}

/**
 * Checks again, later in a request's life, that the credential a principal was made from is still
 * accepted (D27: before a held sync request answers).
 */
export interface CredentialCheck {
  /** Throws the `AuthenticationError` a new request with the same credential would get now, if any. */
  recheck(principal: Principal): Promise<void>;
}
