import type { Principal } from '../auth/principal.js';
import { SERVICE_NAMESPACE } from '../changes/change-log.js';

/**
 * Whose view a read is (D5, D6): who else sees exactly what one caller sees. A value rather than a
 * string, so that no two audiences can be written alike:
 * - `service`: service-owned content, seen alike by every caller on the same plan;
 * - `account`: an account's own content, seen by that account only;
 * - `caller`: one caller's view before it is known whose content a read holds (the plan and the
 *   selected account together; `null` when the caller selected none).
 *
 * `null` where an audience is asked for means every caller alike: what depends on nobody's view (the
 * service's Catalogs listed without the account's, a service Catalog's Resources).
 */
export type Audience =
  | { readonly kind: 'service'; readonly plan: string }
  | { readonly kind: 'account'; readonly accountId: string }
  | { readonly kind: 'caller'; readonly plan: string; readonly accountId: string | null }
  | RestrictedAudience;

/**
 * D32: those of an audience (`within`; null for every caller) whose keys are restricted to the same
 * Catalogs: the canonical set named by its digest. Lists are shared under it alone, since which
 * Catalogs they hold depends on the set.
 */
export interface RestrictedAudience {
  readonly kind: 'restricted';
  readonly digest: string;
  readonly within: ViewAudience | null;
}

/** An audience by whose view alone (D5, D6), whatever keys' restrictions. */
export type ViewAudience = Exclude<Audience, RestrictedAudience>;

/**
 * A read's outcome as the read side knows it: the domain value, the audience that sees the same value,
 * and the namespaces of the change log it is made of (`svc`, an account id, or both), whose changes
 * make it stale (D26).
 */
export interface Seen<T> {
  readonly value: T;
  readonly audience: Audience | null;
  readonly namespaces: readonly string[];
  /**
   * The version tag of the one object a write can name (object-tags.ts), when the value is one: the
   * validator of its answers, so that their ETag is a valid If-Match for its writes (D29).
   */
  readonly tag?: string;
}

/**
 * Who else sees exactly what `principal` sees of something owned by `catalogAccountId` (null for the
 * service). Visibility decides service-owned content by its own state alone, never by the caller's
 * account, so every caller sees the same of it, and plans set some callers apart; an account's content
 * is seen by that account only.
 */
export function audienceOf(principal: Principal, catalogAccountId: string | null): ViewAudience {
  return catalogAccountId === null
    ? { kind: 'service', plan: principal.plan }
    : { kind: 'account', accountId: catalogAccountId };
}

/** The caller's own view: what a read is shared under while it is not known whose content it holds. */
export function callerAudience(principal: Principal): ViewAudience {
  return { kind: 'caller', plan: principal.plan, accountId: principal.accountId };
}

/**
 * The view of the Catalogs of an account (the Catalogs list mixes them with the service's, which
 * every account sees alike, so it is one account's view whatever the caller's plan). A caller with no
 * account selected sees the service's alone, under a caller view of its own.
 */
export function accountView(principal: Principal): ViewAudience {
  return principal.accountId === null
    ? callerAudience(principal)
    : { kind: 'account', accountId: principal.accountId };
}

/**
 * The audience of a list for `principal`: `audience` itself, unless its key is restricted to some
 * Catalogs (D32), when only keys restricted to the same set see the same list. One null check for
 * every other caller.
 */
export function listAudience(principal: Principal, audience: ViewAudience | null): Audience | null {
  const restrictions = principal.restrictions;
  if (restrictions === null || restrictions.catalogs === null) return audience;
  return { kind: 'restricted', digest: restrictions.digest, within: audience };
}

/** The namespace of what `catalogAccountId` (null for the service) owns. */
export function namespaceOf(catalogAccountId: string | null): string {
  return catalogAccountId ?? SERVICE_NAMESPACE;
}

/** What a list of Catalogs in `principal`'s view is made of: the service's, and its account's. */
export function viewNamespaces(principal: Principal): readonly string[] {
  return principal.accountId === null ? [SERVICE_NAMESPACE] : [SERVICE_NAMESPACE, principal.accountId];
}
