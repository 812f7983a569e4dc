import type { Scope } from '../schemas/identity.js';

export type Credential =
  | { readonly kind: 'api-key'; readonly keyId: string }
  | {
      readonly kind: 'access-token';
      /** The user (`sub`). */
      readonly subject: string;
      /** Every account the token lets the user act for (D9), whichever one this request selected. */
      readonly accounts: readonly string[];
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
}
