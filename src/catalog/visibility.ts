import type { Expression, ExpressionBuilder, SqlBool } from 'kysely';
import type { Principal } from '../auth/principal.js';
import type { Database, ResourceVersionTable } from '../db/tables.js';
import type { Facets } from '../schemas/common.js';

/**
 * Visibility (D5), stated once. Every query that reads Catalogs, Resources or Resource Versions for a
 * caller filters through these expressions; anything they exclude is answered 404 as if absent.
 */

/**
 * What visibility depends on: the caller's account alone. A query built once for every caller with an
 * account (prepared-query.ts) is built from this, with the account as a value.
 */
export type Viewer = Pick<Principal, 'accountId'>;

/** Service-owned Catalogs in `active` or `archived`, and every Catalog of the caller's account. */
export function catalogVisibleTo(principal: Viewer) {
  return (eb: ExpressionBuilder<Database, 'catalogs'>): Expression<SqlBool> => {
    const published = eb.and([
      eb('catalogs.account_id', 'is', null),
      eb('catalogs.status', 'in', ['active', 'archived']),
    ]);
    return principal.accountId === null
      ? published
      : eb.or([published, eb('catalogs.account_id', '=', principal.accountId)]);
  };
}

/** A Resource of a visible Catalog, unless it is a service-owned draft. */
export function resourceVisibleTo(principal: Viewer) {
  return (eb: ExpressionBuilder<Database, 'catalogs' | 'resources'>): Expression<SqlBool> =>
    eb.and([
      catalogVisibleTo(principal)(eb),
      eb.or([eb('catalogs.account_id', 'is not', null), eb('resources.status', '!=', 'draft')]),
    ]);
}

/**
 * Whose a Catalog is: the rules for what is in a Catalog already found visible ask nothing else of it
 * (and a statement prepared for one of them is prepared for every Catalog of the same owner).
 */
export type CatalogOwner = 'svc' | 'account';

export const ownerOf = (catalog: { readonly account_id: string | null }): CatalogOwner =>
  catalog.account_id === null ? 'svc' : 'account';

/**
 * The Resources of a Catalog already found visible (`catalogVisibleTo`), owned by `owner`: every one
 * of an account's Catalog, and a service-owned Catalog's that are not drafts. Needs no join, so a page
 * of ids is read from an index alone.
 */
export function resourceVisibleIn(owner: CatalogOwner) {
  return (eb: ExpressionBuilder<Database, 'resources'>): Expression<SqlBool> =>
    owner === 'svc' ? eb('resources.status', '!=', 'draft') : eb.lit(true);
}

/** A version of a visible Resource, unless it is a service-owned draft version. */
export function versionVisibleTo(principal: Viewer) {
  return (
    eb: ExpressionBuilder<Database, 'catalogs' | 'resources' | 'resource_versions'>,
  ): Expression<SqlBool> =>
    eb.and([
      resourceVisibleTo(principal)(eb),
      eb.or([eb('catalogs.account_id', 'is not', null), eb('resource_versions.status', '!=', 'draft')]),
    ]);
}

/** A query that joins a Resource's current version under the alias `v`. */
export type WithCurrentVersion = Database & { v: ResourceVersionTable };

/**
 * The version rule above for the current version joined beside its Resource: a service-owned draft
 * version is never shown, not even as `currentVersion`; the Resource then has no current version
 * to show.
 */
export function currentVersionVisible(eb: ExpressionBuilder<WithCurrentVersion, 'catalogs' | 'v'>) {
  return eb.or([eb('catalogs.account_id', 'is not', null), eb('v.status', '!=', 'draft')]);
}

/** `currentVersionVisible` for the Resources of a Catalog already found visible, without joining it. */
export function currentVersionVisibleIn(owner: CatalogOwner) {
  return (eb: ExpressionBuilder<WithCurrentVersion, 'v'>): Expression<SqlBool> =>
    owner === 'svc' ? eb('v.status', '!=', 'draft') : eb.lit(true);
}

/**
 * Plans (D6): a service-owned Resource whose `planAccess` is non-empty admits only those plans.
 * Account-owned Resources are never gated.
 */
export function planAllows(principal: Principal, serviceOwned: boolean, facets: Facets | undefined): boolean {
  const plans = facets?.planAccess;
  return !serviceOwned || !plans || plans.length === 0 || plans.includes(principal.plan);
}
