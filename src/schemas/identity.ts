import { type Static, Type } from '@sinclair/typebox';
import { API_KEY_PATTERN, ENVIRONMENTS, KEY_ID_PATTERN } from './api-key-format.js';
import {
  ADDRESS_RANGE_PATTERN,
  CATALOG_GRANT_PATTERN,
  Counter,
  DateTime,
  Name,
  Nullable,
  Page,
  PageQuery,
  SLUG_PATTERN,
  StringEnum,
} from './common.js';

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

/** D32: the most entries a key's `catalogs` or `allowedIps` may list. */
export const MAX_RESTRICTION_ENTRIES = 100;

export const CatalogGrants = Type.Array(Type.String({ maxLength: 124, pattern: CATALOG_GRANT_PATTERN }), {
  minItems: 1,
  maxItems: MAX_RESTRICTION_ENTRIES,
  description:
    'the Catalogs the key may read (and, with playbook:write, write): a ref (org/runbooks, svc/handbook) or every Catalog of an owner (org/*, svc/*); service Catalogs are outside unless named; 1-100 entries',
});
export const AllowedIps = Type.Array(Type.String({ maxLength: 49, pattern: ADDRESS_RANGE_PATTERN }), {
  minItems: 1,
  maxItems: MAX_RESTRICTION_ENTRIES,
  description:
    'the client addresses the key is taken from: IPv4 or IPv6 addresses and CIDR ranges (10.0.0.0/8, 2001:db8::/32); an IPv4-mapped IPv6 client address matches IPv4 entries; 1-100 entries',
});
export const KeyRateLimit = Type.Object(
  {
    limit: Type.Integer({ minimum: 1, maximum: 1_000_000_000, description: 'requests per window' }),
    windowSeconds: Type.Integer({ minimum: 1, maximum: 86_400, description: 'the window, in seconds' }),
  },
  {
    additionalProperties: false,
    title: 'KeyRateLimit',
    description:
      "the key's own rate limit, at most the deployment's (no larger limit, no higher rate); counted beside the deployment's",
  },
);
export type KeyRateLimit = Static<typeof KeyRateLimit>;

/**
 * D32: restrictions as a request gives them (creation, or a JSON Merge Patch): a field left out is
 * none at creation and unchanged by a patch; `null` is none.
 */
export const KeyRestrictionsInput = Type.Object(
  {
    catalogs: Type.Optional(Nullable(CatalogGrants)),
    allowedIps: Type.Optional(Nullable(AllowedIps)),
    rateLimit: Type.Optional(Nullable(KeyRateLimit)),
  },
  { additionalProperties: false, title: 'KeyRestrictionsInput' },
);
export type KeyRestrictionsInput = Static<typeof KeyRestrictionsInput>;

/** D32: a key's restrictions as every key object shows them: canonical, each field null when unset. */
export const KeyRestrictions = Type.Object(
  {
    catalogs: Nullable(CatalogGrants),
    allowedIps: Nullable(AllowedIps),
    rateLimit: Nullable(KeyRateLimit),
  },
  { title: 'KeyRestrictions' },
);
export type KeyRestrictions = Static<typeof KeyRestrictions>;

export const CreateApiKeyBody = Type.Object(
  {
    name: ApiKeyName,
    accountId: AccountId,
    scopes: ApiKeyScopes,
    expiresAt: Type.Optional({ ...DateTime, description: 'when the key stops working; in the future' }),
    restrictions: Type.Optional(
      Nullable(KeyRestrictionsInput, { description: 'what the key is limited to; none when left out' }),
    ),
  },
  { additionalProperties: false, title: 'CreateApiKeyBody' },
);
export type CreateApiKeyBody = Static<typeof CreateApiKeyBody>;

/** D32: a JSON Merge Patch of a key (RFC 7396): a field left out is unchanged, `null` lifts it. */
export const UpdateApiKeyBody = Type.Object(
  {
    name: Type.Optional(ApiKeyName),
    expiresAt: Type.Optional(
      Nullable(DateTime, { description: 'when the key stops working, in the future; null: never' }),
    ),
    restrictions: Type.Optional(
      Nullable(KeyRestrictionsInput, {
        description: 'the restrictions to change, field by field; null lifts them all',
      }),
    ),
  },
  { additionalProperties: false, title: 'UpdateApiKeyBody' },
);
export type UpdateApiKeyBody = Static<typeof UpdateApiKeyBody>;

const keyFields = {
  id: ApiKeyId,
  name: ApiKeyName,
  accountId: AccountId,
  scopes: ApiKeyScopes,
  environment: KeyEnvironment,
  createdAt: DateTime,
  expiresAt: Type.Optional({
    ...DateTime,
    description:
      'when the key stops working: set at creation or by a change, or by a roll (the end of the overlap)',
  }),
  restrictions: Nullable(KeyRestrictions, {
    description: 'what the key is limited to: its Catalogs, client addresses and rate; null for none',
  }),
};

/** An API key as listed: never its secret. */
export const ApiKey = Type.Object(
  {
    ...keyFields,
    lastUsedAt: Type.Optional({
      ...DateTime,
      description: 'last use the key was verified for, seen by every instance within a minute',
    }),
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

/** D32: the lengths a key's usage is counted in. */
export const USAGE_GRANULARITIES = ['hour', 'day'] as const;
export type UsageGranularity = (typeof USAGE_GRANULARITIES)[number];
/** D32: how far back a key's usage may be asked for, in days. */
export const MAX_USAGE_DAYS = 90;

export const KeyUsageQuery = Type.Object(
  {
    from: Type.Optional({
      ...DateTime,
      description: `the first bucket holds it; at most ${MAX_USAGE_DAYS} days back; 7 days back by default`,
    }),
    to: Type.Optional({ ...DateTime, description: 'the buckets start before it; now by default' }),
    granularity: Type.Optional(
      StringEnum(USAGE_GRANULARITIES, { description: 'the length of a bucket, in UTC; day by default' }),
    ),
  },
  { additionalProperties: false },
);
export type KeyUsageQuery = Static<typeof KeyUsageQuery>;

/** D32: a key's answers in one bucket, by outcome. */
export const UsageBucket = Type.Object(
  {
    start: DateTime,
    success: { ...Counter, description: 'answers below 400 (304 included)' },
    clientError: { ...Counter, description: 'other 4xx answers: not 401, 403 or 429' },
    unauthorized: {
      ...Counter,
      description:
        '401 and 403 answers: a wrong secret, a revoked or expired key, a scope or an address refused',
    },
    rateLimited: { ...Counter, description: '429 answers' },
    serverError: { ...Counter, description: '5xx answers' },
  },
  { title: 'UsageBucket' },
);
export type UsageBucket = Static<typeof UsageBucket>;

/** D32: how one key was used, bucket by bucket, and its last use. */
export const KeyUsage = Type.Object(
  {
    keyId: ApiKeyId,
    granularity: StringEnum(USAGE_GRANULARITIES),
    buckets: Type.Array(UsageBucket, {
      maxItems: (MAX_USAGE_DAYS + 1) * 24,
      description:
        'every bucket from the one that holds from, up to to or now, oldest first; counts of zero included',
    }),
    lastUsed: Nullable(
      Type.Object({
        at: DateTime,
        address: Nullable(
          Type.String({ maxLength: 49, pattern: ADDRESS_RANGE_PATTERN, description: 'the client address' }),
        ),
      }),
      {
        description:
          'the last request the key was verified for, and where it came from; null when never used',
      },
    ),
  },
  { title: 'KeyUsage' },
);
export type KeyUsage = Static<typeof KeyUsage>;

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
          plan: Type.String({
            maxLength: 120,
            pattern: SLUG_PATTERN,
            description: "the account's plan (free until one is set)",
          }),
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
      // A JWS in its compact form: three base64url parts.
      pattern: '^[A-Za-z0-9_-]+\\.[A-Za-z0-9_-]+\\.[A-Za-z0-9_-]+$',
      description: 'a user access token, for Authorization: Bearer',
    }),
    tokenType: Type.Literal('Bearer'),
    expiresAt: { ...DateTime, description: 'when the token stops working' },
  },
  { title: 'DevSignInToken' },
);
export type DevSignInToken = Static<typeof DevSignInToken>;
