import { type Static, Type } from '@sinclair/typebox';
import { API_KEY_PATTERN, ENVIRONMENTS, KEY_ID_PATTERN } from './api-key-format.js';
import { DateTime, Name, Page, PageQuery, StringEnum } from './common.js';

/** The identity area (D8): API keys, created and managed with a user access token. */

/** What names the service's own content, in paths and in the change log's namespaces (D26): no account. */
export const SERVICE_OWNER = 'svc';

/** Account ids are opaque to the service but must be printable and bounded, and are never `svc`. */
export const ACCOUNT_ID_PATTERN = /^(?!svc$)[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;

export const SCOPES = ['playbook:read', 'playbook:write'] as const;
export const Scope = StringEnum(SCOPES);
export type Scope = Static<typeof Scope>;

export const ApiKeyId = Type.String({
  maxLength: 32,
  pattern: KEY_ID_PATTERN,
  description: 'key id: the public part of the key string, between its environment and its secret',
});
export const AccountId = Type.String({
  minLength: 1,
  maxLength: 128,
  pattern: ACCOUNT_ID_PATTERN.source,
  description: 'account id (`svc` names the service, never an account)',
});
export const ApiKeyName = Name(100, {
  description: 'label of the key: 1-100 characters on one line, not blank, without control characters',
});
export const KeyEnvironment = StringEnum(ENVIRONMENTS, {
  description: 'the environment the key works in: test keys on test deployments, live keys on live ones',
});
export const ApiKeyScopes = Type.Array(Scope, {
  minItems: 1,
  maxItems: SCOPES.length,
  uniqueItems: true,
  description: 'granted scopes, distinct; playbook:write does not imply playbook:read',
});

export const CreateApiKeyBody = Type.Object(
  {
    name: ApiKeyName,
    accountId: AccountId,
    scopes: ApiKeyScopes,
    expiresAt: Type.Optional({ ...DateTime, description: 'when the key stops working; in the future' }),
  },
  { additionalProperties: false, title: 'CreateApiKeyBody' },
);
export type CreateApiKeyBody = Static<typeof CreateApiKeyBody>;

const keyFields = {
  id: ApiKeyId,
  name: ApiKeyName,
  accountId: AccountId,
  scopes: ApiKeyScopes,
  environment: KeyEnvironment,
  createdAt: DateTime,
  expiresAt: Type.Optional({
    ...DateTime,
    description: 'when the key stops working: set at creation, or by a roll (the end of the overlap)',
  }),
};

/** An API key as listed: never its secret. */
export const ApiKey = Type.Object(
  {
    ...keyFields,
    lastUsedAt: Type.Optional({ ...DateTime, description: 'last successful use, recorded within seconds' }),
    revokedAt: Type.Optional(DateTime),
    replacedBy: Type.Optional({
      ...ApiKeyId,
      description: 'the key a roll minted to replace this one; a key is rolled once',
    }),
  },
  { title: 'ApiKey' },
);
export type ApiKey = Static<typeof ApiKey>;

/** The answer of key creation: the only time the key string is ever shown. */
export const CreatedApiKey = Type.Object(
  {
    ...keyFields,
    key: Type.String({
      maxLength: 200,
      pattern: API_KEY_PATTERN,
      description: 'the whole key string, to send as x-api-key; shown once and never again',
    }),
  },
  { title: 'CreatedApiKey' },
);
export type CreatedApiKey = Static<typeof CreatedApiKey>;

export const ApiKeyPage = Page(ApiKey);
export type ApiKeyPage = Static<typeof ApiKeyPage>;

export const ListApiKeysQuery = Type.Object(
  { accountId: AccountId, ...PageQuery },
  { additionalProperties: false },
);
export const ApiKeyParams = Type.Object({ keyId: ApiKeyId });

/** D22: the bounds of a roll's overlap, in seconds: a week at most, a day when left out. */
export const MAX_ROLL_OVERLAP_S = 604_800;
export const DEFAULT_ROLL_OVERLAP_S = 86_400;

/** D22: how long the old key of a roll keeps working, in seconds. */
export const RollApiKeyBody = Type.Object(
  {
    overlapSeconds: Type.Optional(
      Type.Integer({
        minimum: 0,
        maximum: MAX_ROLL_OVERLAP_S,
        default: DEFAULT_ROLL_OVERLAP_S,
        description: `how long the old key keeps working, 0 to ${MAX_ROLL_OVERLAP_S} seconds (a week); one day when left out; 0 ends it at once`,
      }),
    ),
  },
  { additionalProperties: false, title: 'RollApiKeyBody' },
);
export type RollApiKeyBody = Static<typeof RollApiKeyBody>;

/** The verdicts of the secret scanning partner program's feedback format. */
export const LEAK_LABELS = ['true_positive', 'false_positive'] as const;

/** D22: a leak report, in the payload format of GitHub's secret scanning partner program. */
export const LeakReport = Type.Array(
  Type.Object(
    {
      token: Type.String({ minLength: 1, maxLength: 1000, description: 'the string found' }),
      type: Type.String({ maxLength: 200, description: "the reporter's name for the kind of secret" }),
      url: Type.Optional(Type.String({ maxLength: 2048, description: 'where the string was found' })),
      source: Type.Optional(
        Type.String({ maxLength: 100, description: 'what kind of place that is (content, commit, npm…)' }),
      ),
    },
    // The reporter's format may gain fields: they are kept out of the verdict, not refused.
    { additionalProperties: true, title: 'LeakReportItem' },
  ),
  { minItems: 1, maxItems: 1000, title: 'LeakReport' },
);
export type LeakReport = Static<typeof LeakReport>;

export const LeakVerdicts = Type.Array(
  Type.Object(
    {
      token_hash: Type.String({
        pattern: '^[0-9a-f]{64}$',
        maxLength: 64,
        description: 'SHA-256 of the reported token, hex: the token itself is never echoed',
      }),
      token_type: Type.String({ maxLength: 200, description: 'the type the report gave' }),
      label: StringEnum(LEAK_LABELS, {
        description:
          'true_positive: a key of this deployment, now revoked (or already); false_positive: anything else',
      }),
    },
    { title: 'LeakVerdict' },
  ),
  { maxItems: 1000, title: 'LeakVerdicts' },
);
export type LeakVerdicts = Static<typeof LeakVerdicts>;

/** D33: the most accounts `GET /v3/identity/me` lists; a token naming more is cut to these. */
export const MAX_LISTED_ACCOUNTS = 1000;

/** D33: who a user access token is, and the accounts it lets the user act for. */
export const Me = Type.Object(
  {
    user: Type.Object({
      id: Type.String({ minLength: 1, maxLength: 256, description: "the user: the token's subject" }),
    }),
    accounts: Type.Array(
      Type.Object(
        {
          id: AccountId,
          name: Type.Optional(
            Type.String({ maxLength: 200, description: "the account's display name, when it has one" }),
          ),
          plan: Type.String({ maxLength: 120, description: "the account's plan (free until one is set)" }),
        },
        { title: 'UserAccount' },
      ),
      {
        maxItems: MAX_LISTED_ACCOUNTS,
        description: 'every account the token lets the user act for, in the order the token lists them',
      },
    ),
    tokenExpiresAt: { ...DateTime, description: 'when the access token stops working' },
  },
  { title: 'Me' },
);
export type Me = Static<typeof Me>;

/** D33: the development sign-in's bounds on a token's life, in seconds: an hour at most and by default. */
export const MAX_DEV_SIGN_IN_TTL_S = 3600;

/** D33: the development sign-in's request, as `playbook token` takes it. */
export const DevSignInBody = Type.Object(
  {
    user: Type.String({
      minLength: 1,
      maxLength: 256,
      pattern: '\\S',
      description: "the user to sign in as: the token's subject",
    }),
    accounts: Type.Array(AccountId, {
      minItems: 1,
      maxItems: 100,
      uniqueItems: true,
      description: 'the accounts the user may act for',
    }),
    ttlSeconds: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: MAX_DEV_SIGN_IN_TTL_S,
        description: `the token's life in seconds, ${MAX_DEV_SIGN_IN_TTL_S} (an hour) when left out; never past PLAYBOOK_JWT_MAX_TTL_S`,
      }),
    ),
  },
  { additionalProperties: false, title: 'DevSignInBody' },
);
export type DevSignInBody = Static<typeof DevSignInBody>;

/** D33: the development sign-in's answer: a user access token, as an OAuth token endpoint gives one. */
export const DevSignInToken = Type.Object(
  {
    accessToken: Type.String({
      maxLength: 8192,
      description: 'a user access token, for Authorization: Bearer',
    }),
    tokenType: Type.Literal('Bearer'),
    expiresAt: { ...DateTime, description: 'when the token stops working' },
  },
  { title: 'DevSignInToken' },
);
export type DevSignInToken = Static<typeof DevSignInToken>;
