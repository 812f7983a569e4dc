import type { Principal } from '../auth/principal.js';

/**
 * Whose view an answer is (D5, D6), as a value rather than a string, so that no two audiences can be
 * written alike:
 * - `service`: service-owned content, seen alike by every caller on the same plan;
 * - `account`: an account's own content, seen by that account only;
 * - `caller`: one caller's view before it is known whose content the answer holds (the plan and the
 *   selected account together; `null` when the caller selected none).
 */
export type Audience =
  | { readonly kind: 'service'; readonly plan: string }
  | { readonly kind: 'account'; readonly accountId: string }
  | { readonly kind: 'caller'; readonly plan: string; readonly accountId: string | null };

/** What else names an answer: the operation's parameters. */
export type KeyPart = string | number | null;

/**
 * Who else sees exactly what `principal` sees of something owned by `catalogAccountId` (null for the
 * service): the audience an answer may be shared with. Visibility decides service-owned content by
 * its own state alone, never by the caller's account, so every caller sees the same of it, and plans
 * set some callers apart; an account's content is seen by that account only.
 */
export function audienceOf(principal: Principal, catalogAccountId: string | null): Audience {
  return catalogAccountId === null
    ? { kind: 'service', plan: principal.plan }
    : { kind: 'account', accountId: catalogAccountId };
}

/** The caller's own view: what a load is shared under while it does not know whose content it reads. */
export function callerAudience(principal: Principal): Audience {
  return { kind: 'caller', plan: principal.plan, accountId: principal.accountId };
}

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
  }
}

/**
 * The one key scheme of the answers kept in memory: the operation, the audience, then the parameters.
 * It is the JSON text of that list, which tells strings, numbers and null apart and writes every
 * string whole, separators and all, so two keys are equal only when every part is. `null` as the
 * audience is for what depends on no caller (the positions of a Catalog's Resources).
 */
export function answerKey(
  operation: string,
  audience: Audience | null,
  ...params: readonly KeyPart[]
): string {
  return JSON.stringify([operation, ...audienceParts(audience), ...params]);
}
