import { isLoopbackUrl, type Me, Playbook, PlaybookError } from '@playbook/client';
import { Store } from './store';

/**
 * The signed-in user, in memory only (D33): the access token lives in this module and nowhere else —
 * never in localStorage, sessionStorage, IndexedDB or a cookie — so a reload signs in again.
 */

export interface SignedIn {
  readonly kind: 'signed-in';
  readonly me: Me;
  /** The account the console acts for: the switcher's choice. */
  readonly accountId: string | undefined;
  readonly via: 'oidc' | 'development';
  /** When the token stops working, in milliseconds since the epoch. */
  readonly expiresAt: number;
  /** The API client, with the token and the account. */
  readonly client: Playbook;
}

export interface SignedOut {
  readonly kind: 'signed-out';
  /** Why, when the user did not ask for it: the token ran out, and the page waits for a new sign-in. */
  readonly reason?: 'expired';
}

export type Session = SignedIn | SignedOut;

export const session = new Store<Session>({ kind: 'signed-out' });

/** The account chosen last, kept through a new sign-in so that the page comes back as it was. */
let lastAccount: string | undefined;
let expiry: ReturnType<typeof setTimeout> | undefined;
let token: string | undefined;
/** Asked for a new token without a prompt when the current one runs out (the identity provider's). */
let renew: (() => Promise<{ accessToken: string; expiresAt: number } | undefined>) | undefined;

/**
 * D33: served over plain HTTP from a host that is not loopback, the console does not sign in: a
 * token would cross the network readable by anyone on the way.
 */
export function insecureOrigin(location: Location): boolean {
  return location.protocol === 'http:' && !isLoopbackUrl(location.href);
}

function clientFor(accessToken: string, accountId: string | undefined): Playbook {
  return new Playbook({
    accessToken,
    baseUrl: location.origin,
    ...(accountId === undefined ? {} : { accountId }),
    // A person is waiting: one quick retry, then the error is shown.
    maxRetries: 1,
    maxRetryDelayMs: 3000,
  });
}

/**
 * Signs in with an access token: asks the service who it is (`GET /v3/identity/me`), then acts for the
 * account chosen before, or the first one the token lists.
 */
export async function signIn(
  accessToken: string,
  expiresAt: number,
  via: SignedIn['via'],
  renewal?: typeof renew,
): Promise<void> {
  const me = await clientFor(accessToken, undefined).me();
  const accountId = me.accounts.some((account) => account.id === lastAccount)
    ? lastAccount
    : me.accounts[0]?.id;
  token = accessToken;
  renew = renewal;
  lastAccount = accountId;
  session.set({
    kind: 'signed-in',
    me,
    accountId,
    via,
    expiresAt,
    client: clientFor(accessToken, accountId),
  });
  clearTimeout(expiry);
  expiry = setTimeout(() => void ended(), Math.max(0, expiresAt - Date.now()));
}

/** The account switcher's choice. */
export function switchAccount(accountId: string): void {
  const current = session.get();
  if (current.kind !== 'signed-in' || token === undefined) return;
  lastAccount = accountId;
  session.set({ ...current, accountId, client: clientFor(token, accountId) });
}

/** Forgets the token. */
export function signOut(): void {
  clearTimeout(expiry);
  token = undefined;
  renew = undefined;
  lastAccount = undefined;
  session.set({ kind: 'signed-out' });
}

/**
 * The token has run out, or the service refused it: a new one without a prompt when the identity
 * provider gives one, else the sign-in in place of the page, which comes back once signed in.
 */
async function ended(): Promise<void> {
  const current = session.get();
  if (current.kind !== 'signed-in') return;
  const renewed = await renew?.().catch(() => undefined);
  if (renewed && session.get() === current) {
    await signIn(renewed.accessToken, renewed.expiresAt, current.via, renew).catch(() => expire());
    return;
  }
  expire();
}

function expire(): void {
  clearTimeout(expiry);
  token = undefined;
  session.set({ kind: 'signed-out', reason: 'expired' });
}

/** Whether a failure is the service refusing the token; if so, the page asks for a new sign-in. */
export function refusedToken(error: unknown): boolean {
  if (error instanceof PlaybookError && error.status === 401) {
    void ended();
    return true;
  }
  return false;
}
