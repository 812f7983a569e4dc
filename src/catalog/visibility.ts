import type { Expression, ExpressionBuilder, SqlBool } from 'kysely';
import type { SlugGrant } from '../auth/key-restrictions.js';
import type { Principal } from '../auth/principal.js';
import type { Database, ResourceVersionTable } from '../db/tables.js';
import type { Facets } from '../schemas/common.js';

/**
 * Visibility (D5), stated once. Every query that reads Catalogs, Resources or Resource Versions for a
 * caller filters through these expressions; anything they exclude is answered 404 as if absent.
 */

/**
 * What visibility depends on: the caller's account, and the Catalogs its key is restricted to (D32),
 * when it is. A query built once for every caller with an account (prepared-query.ts) is built from
 * the account alone, as a value: a restricted caller's reads through one check what it returns
 * (`catalogAdmitted`).
 */
export type Viewer = Pick<Principal, 'accountId'> & { readonly restrictions?: Principal['restrictions'] };

/**
 * Service-owned Catalogs in `active` or `archived`, and every Catalog of the caller's account; of
 * those, for a key restricted to some Catalogs (D32), the ones its `catalogs` admit.
 */
export function catalogVisibleTo(principal: Viewer) {
  const grant = principal.restrictions?.catalogs ?? null;
  return (eb: ExpressionBuilder<Database, 'catalogs'>): Expression<SqlBool> => {
    const published = eb.and([
      eb('catalogs.account_id', 'is', null),
      eb('catalogs.status', 'in', ['active', 'archived']),
      ...(grant === null ? [] : [slugAdmitted(eb, grant.svc)]),
    ]);
    if (principal.accountId === null) return published;
    const own = eb('catalogs.account_id', '=', principal.accountId);
    return eb.or([published, grant === null ? own : eb.and([own, slugAdmitted(eb, grant.org)])]);
  };
}

/** The Catalogs of one owner a key's grant admits, by slug. */
function slugAdmitted(eb: ExpressionBuilder<Database, 'catalogs'>, slugs: SlugGrant): Expression<SqlBool> {
  if (slugs === '*') return eb.lit(true);
  return slugs.size === 0 ? eb.lit(false) : eb('catalogs.slug', 'in', [...slugs]);
}

/**
 * D32: whether a key's `catalogs` admit the Catalog `slug` of `catalogAccountId` (null for the
 * service): every Catalog for a caller not restricted to some; else a service Catalog that a `svc/…`
 * entry names, or one of the caller's own account that an `org/…` entry names. A read that its
 * statement cannot restrict (a statement prepared for every caller) checks what it found with this.
 */
export function catalogAdmitted(viewer: Viewer, catalogAccountId: string | null, slug: string): boolean {
  const grant = viewer.restrictions?.catalogs;
  if (!grant) return true;
  if (catalogAccountId !== null && catalogAccountId !== viewer.accountId) return false;
  const slugs = catalogAccountId === null ? grant.svc : grant.org;
  return slugs === '*' || slugs.has(slug);
}

/** `catalogAdmitted` of the Catalog a human ref `owner/slug` names to the caller (D5: `org` is its own). */
export function catalogRefAdmitted(viewer: Viewer, owner: 'svc' | 'org', slug: string): boolean {
  if (!viewer.restrictions?.catalogs) return true;
  if (owner === 'svc') return catalogAdmitted(viewer, null, slug);
  return viewer.accountId !== null && catalogAdmitted(viewer, viewer.accountId, slug);
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
