import type { Audience } from '../catalog/audience.js';

/**
 * What is kept in memory, and what else names one of each beside its audience: the one key scheme of
 * the answers (and list positions) the edge keeps. A key names everything that decides the bytes of
 * what it names.
 */
export interface KeptParams {
  /** A page of Catalogs: the source scopes asked for (as one set), the capability, the page. */
  readonly catalogs: readonly [scopes: string, capability: string | null, page: number, pageSize: number];
  /** A page of one Catalog's Resources: the Catalog's slug (its owner is in the audience), kinds. */
  readonly resources: readonly [catalogSlug: string, kinds: string, page: number, pageSize: number];
  /** One Catalog by its slug (its owner is in the audience). */
  readonly catalog: readonly [catalogSlug: string];
  readonly resource: readonly [resourceId: string];
  /** One Resource by its Catalog's slug and its own (the owner is in the audience). */
  readonly resourceByRef: readonly [catalogSlug: string, resourceSlug: string];
  readonly versions: readonly [resourceId: string, page: number, pageSize: number];
  readonly version: readonly [resourceId: string, versionId: string];
  /** Where the pages of a list of one Catalog's Resources begin (depends on no caller). */
  readonly positions: readonly [catalogId: string, kinds: string];
}

export type Kept = keyof KeptParams;

declare const answerKeyBrand: unique symbol;
/** A key of the answers kept in memory: made by `answerKey` alone. */
export type AnswerKey = string & { readonly [answerKeyBrand]: true };

/** An account id, or the absence of one, as a JSON value of its own type. */
function accountPart(accountId: string | null): string | null | false {
  // JSON writes `undefined` in an array as null: give it a value no id and no "none" can have, so
  // that a principal built wrong never shares the key of a caller who selected no account.
  return accountId === undefined ? false : accountId;
}

function audienceParts(audience: Audience | null): readonly (string | null | false)[] {
  if (audience === null) return ['any'];
  switch (audience.kind) {
    case 'service':
      return ['service', audience.plan];
    case 'account':
      return ['account', accountPart(audience.accountId)];
    case 'caller':
      return ['caller', audience.plan, accountPart(audience.accountId)];
    case 'restricted':
      return ['restricted', audience.digest, ...audienceParts(audience.within)];
  }
}

/**
 * The key of what `kept` names for `audience`: the JSON text of [kind, audience, parameters], which
 * tells strings, numbers and null apart and writes every string whole, separators and all, so two keys
 * are equal only when every part is (D5: another account's data is invisible, in memory too). `null`
 * as the audience is for what every caller sees alike.
 *
 * @example
 * answerKey('resource', { kind: 'account', accountId: 'acme' }, resourceId);
 */
export function answerKey<K extends Kept>(
  kept: K,
  audience: Audience | null,
  ...params: KeptParams[K]
): AnswerKey {
  return JSON.stringify([kept, ...audienceParts(audience), ...params]) as AnswerKey;
}

/** A filter's values as one canonical text: the same set in any order and repetition is the same key. */
export function setKey(values: readonly string[] | undefined): string {
  return [...new Set(values ?? [])].sort().join(',');
}
