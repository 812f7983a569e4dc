import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { answerKey, type Kept, type KeptParams } from '../../src/answers/answer-keys.js';
import { type Audience, audienceOf, callerAudience } from '../../src/catalog/audience.js';

/** Any parameter of a key, as the property below generates them past the types of each kind. */
type KeyPart = string | number | null;

/**
 * The one key scheme of the answers kept in memory (answers/answer-keys.ts): two keys are equal only
 * when operation, audience and every parameter are, whatever the text of an id or a plan holds. An
 * account literally named "null" and a caller with no account, or ids holding the separators of a
 * naive scheme, never meet under one key (D5: another account's data is invisible, in memory too).
 */

/** Text that looks like the parts of a naive key: separators, quotes, "null", "undefined", empty. */
const trickyText = fc.oneof(
  fc.constantFrom(
    'null',
    'undefined',
    '',
    'free',
    'pro',
    'free:null',
    'account:',
    'svc',
    ':',
    '|',
    '"',
    ',',
    '[',
    ']',
  ),
  fc.string({
    unit: fc.constantFrom('a', 'n', 'u', 'l', ':', '|', '"', ',', '\\', '[', ']', '0', ' '),
    maxLength: 8,
  }),
  fc.string({ maxLength: 6 }),
);

/** Account ids as a principal may carry them, the impossible `undefined` included. */
const accountId = fc.oneof(fc.constant(null), fc.constant(undefined), trickyText) as fc.Arbitrary<
  string | null
>;

const audience: fc.Arbitrary<Audience | null> = fc.oneof(
  fc.constant(null),
  fc.record({ kind: fc.constant('service' as const), plan: trickyText }),
  fc.record({ kind: fc.constant('account' as const), accountId: trickyText }),
  fc.record({ kind: fc.constant('caller' as const), plan: trickyText, accountId }),
);

const part: fc.Arbitrary<KeyPart> = fc.oneof(
  fc.constant(null),
  trickyText,
  fc.integer({ min: -2, max: 200 }),
);

const keyInput = fc.record({
  operation: fc.constantFrom(
    'catalogs',
    'resources',
    'resource',
    'versions',
    'version',
    'positions',
    'resource|x',
  ),
  audience,
  params: fc.array(part, { maxLength: 4 }),
});
type KeyInput = { operation: string; audience: Audience | null; params: KeyPart[] };

/** What the inputs are, with `undefined` and `null` told apart and a missing field kept missing. */
function identity(input: KeyInput): string {
  return (
    JSON.stringify(input, (_name, value) => (value === undefined ? '\u0000undefined' : value)) +
    `|${Object.keys(input.audience ?? {}).join(',')}`
  );
}

const keyOf = (input: KeyInput) =>
  answerKey(input.operation as Kept, input.audience, ...(input.params as unknown as KeptParams[Kept]));

describe('answer keys: one scheme, no two audiences alike', () => {
  it('two inputs get the same key exactly when they are the same input', () => {
    fc.assert(
      fc.property(keyInput, keyInput, (a, b) => {
        expect(keyOf(a) === keyOf(b)).toBe(identity(a) === identity(b));
      }),
      { numRuns: 20_000 },
    );
  });

  it('a generated population of audiences never shares a key between two different ones', () => {
    fc.assert(
      fc.property(fc.array(keyInput, { minLength: 2, maxLength: 60 }), (inputs) => {
        const byKey = new Map<string, string>();
        for (const input of inputs) {
          const key = keyOf(input);
          const seen = byKey.get(key);
          if (seen !== undefined) expect(seen).toBe(identity(input));
          byKey.set(key, identity(input));
        }
      }),
      { numRuns: 2_000 },
    );
  });

  it('the cases a naive scheme confused are apart', () => {
    const caller = (plan: string, id: string | null | undefined) =>
      answerKey('resource', { kind: 'caller', plan, accountId: id as string | null }, 'r');
    // A caller who selected no account, and the account whose id is "null", "undefined" or empty.
    const keys = [
      caller('free', null),
      caller('free', 'null'),
      caller('free', undefined),
      caller('free', 'undefined'),
      caller('free', ''),
      caller('free:null', ''),
      caller('free', ':null'),
      answerKey('resource', { kind: 'account', accountId: 'null' }, 'r'),
      answerKey('resource', { kind: 'service', plan: 'free' }, 'r'),
      answerKey('resource', { kind: 'service', plan: 'null' }, 'r'),
      answerKey('resource', null, 'r'),
      answerKey('resource', { kind: 'account', accountId: 'a|b' }, 'c'),
      answerKey('resource', { kind: 'account', accountId: 'a' }, 'b|c'),
      answerKey('version', { kind: 'account', accountId: 'a' }, 'b|c', ''),
      answerKey('version', { kind: 'account', accountId: 'a' }, 'b', 'c'),
      answerKey('version', { kind: 'account', accountId: 'a' }, 'b|', 'c'),
    ];
    expect(new Set(keys).size).toBe(keys.length);
  });

  it('audiences come from the principal: service content by plan, account content by its owner', () => {
    const principal = (accountId: string | null, plan: string) => ({
      accountId,
      plan,
      scopes: new Set(['playbook:read' as const]),
      credential: { kind: 'api-key' as const, keyId: 'k' },
      restrictions: null,
    });
    expect(audienceOf(principal('acme', 'pro'), null)).toEqual({ kind: 'service', plan: 'pro' });
    expect(audienceOf(principal(null, 'free'), 'acme')).toEqual({ kind: 'account', accountId: 'acme' });
    expect(callerAudience(principal(null, 'free'))).toEqual({
      kind: 'caller',
      plan: 'free',
      accountId: null,
    });
    // Two callers whose views differ never share a caller key, whichever of them has no account.
    expect(answerKey('resource', callerAudience(principal(null, 'free')), 'r')).not.toBe(
      answerKey('resource', callerAudience(principal('null', 'free')), 'r'),
    );
  });
});
