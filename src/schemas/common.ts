import { type Static, type TSchema, Type } from '@sinclair/typebox';
import { KEY_ID_PATTERN } from './api-key-format.js';

/** The largest integer the contract allows for counters and page numbers. */
export const MAX_COUNTER = Number.MAX_SAFE_INTEGER;

/** A string enum as one JSON Schema `enum`: one list of values gives the schema and the TypeScript union. */
export function StringEnum<const T extends readonly string[]>(
  values: T,
  options: { description?: string } = {},
) {
  return Type.Unsafe<T[number]>({ type: 'string', enum: [...values], ...options });
}

/**
 * `schema` or `null`, as one JSON Schema `type` list rather than an `anyOf`: a value that fails
 * `schema` is then reported by what it fails alone, never also as "must be null". Untitled, so that the
 * OpenAPI document names no component after `schema` that also takes null.
 */
export function Nullable<T extends TSchema>(schema: T, options: { description?: string } = {}) {
  const { title: _title, ...rest } = schema;
  return Type.Unsafe<Static<T> | null>({ ...rest, type: [schema.type, 'null'], ...options });
}

const UUID_PATTERN =
  '^(?:[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[1-8][0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}' +
  '|00000000-0000-0000-0000-000000000000|[fF]{8}-[fF]{4}-[fF]{4}-[fF]{4}-[fF]{12})$';

export const SLUG_PATTERN = '^[a-z0-9]+(?:-[a-z0-9]+)*$';
export const SLUG_REGEX = new RegExp(SLUG_PATTERN);

/** D32: a Catalog a key is restricted to, by human ref (`org/runbooks`), or every one of an owner (`svc/*`). */
export const CATALOG_GRANT_PATTERN = '^(?:svc|org)/(?:\\*|[a-z0-9]+(?:-[a-z0-9]+)*)$';
/**
 * D32: the characters of an IPv4 or IPv6 address or CIDR range; whether it is one is checked with
 * ipaddr.js (auth/key-restrictions.ts).
 */
export const ADDRESS_RANGE_PATTERN = '^[0-9A-Fa-f:.]{2,45}(?:/[0-9]{1,3})?$';
/** What an address or range of a key's restrictions must be, in words. */
export const ADDRESS_RANGE_RULE =
  'must be an IPv4 or IPv6 address (203.0.113.7, 2001:db8::1) or a CIDR range of one (10.0.0.0/8, 2001:db8::/32)';

/** C0 and C1 controls, DEL, and the bidirectional overrides and isolates (D21), as a regex class body. */
export const CONTROLS = '\\u0000-\\u001F\\u007F-\\u009F\\u202A-\\u202E\\u2066-\\u2069';
/**
 * D21: no UTF-16 surrogate outside a pair. Valid UTF-8 cannot carry one, but a JSON escape (`"\\ud800"`)
 * can, and such text has no UTF-8 form: stored or sent on, it would silently become U+FFFD. Written with
 * lookarounds rather than as a class so that it means the same with the `u` flag and without: Ajv
 * compiles patterns with it (a pair is one code point), many
 * readers of the OpenAPI document without it (a pair is two code units). Lazy: an early one is found early.
 */
const NO_LONE_SURROGATE =
  '(?![\\s\\S]*?(?:[\\uD800-\\uDBFF](?![\\uDC00-\\uDFFF])|(?<![\\uD800-\\uDBFF])[\\uDC00-\\uDFFF]))';
/** D21: one line of text, with no control character, direction override or lone surrogate. */
export const SINGLE_LINE_PATTERN = `^${NO_LONE_SURROGATE}[^${CONTROLS}]*$`;
/** D21: one line of text, as above, that is not blank. */
export const NAME_PATTERN = `^${NO_LONE_SURROGATE}(?=[\\s\\S]*\\S)[^${CONTROLS}]*$`;
/** D21: text that may run over lines: tab and line breaks, no other control, override or lone surrogate. */
export const MULTI_LINE_PATTERN =
  `^${NO_LONE_SURROGATE}` +
  '[^\\u0000-\\u0008\\u000B\\u000C\\u000E-\\u001F\\u007F-\\u009F\\u202A-\\u202E\\u2066-\\u2069]*$';

/** D12: hashes are lowercase hex digests. */
export const HASH_PATTERN = '^[0-9a-f]{32,128}$';

/**
 * RFC 9110 §13.1.1-2: `If-Match` and `If-None-Match` hold `*`, or a list of entity tags (`"…"` or
 * `W/"…"`), whose elements may be empty. http/conditional.ts reads them.
 */
const ENTITY_TAG = '(?:W/)?"[^"\\u0000-\\u0020\\u007F]*"';
export const ENTITY_TAGS_PATTERN = `^[ \\t]*(?:\\*|(?:,[ \\t]*)*${ENTITY_TAG}(?:[ \\t]*,(?:[ \\t]*${ENTITY_TAG})?)*)[ \\t]*$`;

/** What a value that fails one of the service's patterns must be, in words: the patterns are not for people. */
export const PATTERN_RULES: Readonly<Record<string, string>> = {
  [UUID_PATTERN]: 'must be a UUID',
  [SLUG_PATTERN]: 'must be a slug: lowercase letters and digits in groups joined by single hyphens',
  [SINGLE_LINE_PATTERN]:
    'must be one line of text, without control characters, direction overrides or unpaired surrogates',
  [NAME_PATTERN]:
    'must be one line of text, not blank, without control characters, direction overrides ' +
    'or unpaired surrogates',
  [MULTI_LINE_PATTERN]:
    'must not hold control characters (but tab and line breaks), direction overrides or unpaired surrogates',
  [ENTITY_TAGS_PATTERN]: 'must be * or a comma-separated list of entity tags, each "…" or W/"…"',
  [HASH_PATTERN]: 'must be a lowercase hex digest',
  [ADDRESS_RANGE_PATTERN]: ADDRESS_RANGE_RULE,
  [CATALOG_GRANT_PATTERN]:
    'must be a Catalog ref (owner/slug) or every Catalog of an owner (owner/*), the owner svc or org',
};

export const Uuid = Type.String({
  maxLength: 36,
  pattern: UUID_PATTERN,
  description: 'uuid (RFC 9562 layout)',
});
export const DateTime = Type.String({
  format: 'date-time',
  maxLength: 35,
  pattern: '^\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}(?::\\d{2}(?:\\.\\d+)?)?Z$',
  description: 'RFC 3339 UTC timestamp',
});
export const Slug = Type.String({ minLength: 1, maxLength: 120, pattern: SLUG_PATTERN });
export const FacetValue = Type.String({ minLength: 1, maxLength: 80, pattern: SLUG_PATTERN });
export const Hash = Type.String({
  minLength: 32,
  maxLength: 128,
  pattern: HASH_PATTERN,
  description: 'lowercase hex digest (SHA-256: 64 characters)',
});
export const Counter = Type.Integer({ minimum: 0, maximum: MAX_COUNTER });
export const VersionLabel = Type.String({ minLength: 1, maxLength: 80, pattern: SINGLE_LINE_PATTERN });
export const Description = Type.String({ maxLength: 1000, pattern: MULTI_LINE_PATTERN });
/** A name or title: one line of text, not blank (D21). */
export function Name(maxLength: number, options: { description?: string } = {}) {
  return Type.String({ minLength: 1, maxLength, pattern: NAME_PATTERN, ...options });
}

export const LIFECYCLE_STATUSES = ['draft', 'active', 'archived'] as const;
export const LifecycleStatus = StringEnum(LIFECYCLE_STATUSES);
export type LifecycleStatus = Static<typeof LifecycleStatus>;

export const SOURCE_SCOPES = ['svc', 'account'] as const;
export const SourceScope = StringEnum(SOURCE_SCOPES);
export type SourceScope = Static<typeof SourceScope>;

export const OWNERS = ['svc', 'org'] as const;
export const Owner = StringEnum(OWNERS);
export type Owner = Static<typeof Owner>;

/** Values one facet may list (D20). */
export const MAX_FACET_VALUES = 100;
const FacetList = Type.Optional(Type.Array(FacetValue, { maxItems: MAX_FACET_VALUES }));
export const Facets = Type.Object(
  {
    capability: FacetList,
    channel: FacetList,
    framework: FacetList,
    planAccess: FacetList,
    technology: FacetList,
  },
  { additionalProperties: false },
);
export type Facets = Static<typeof Facets>;
export type FacetKey = keyof Facets;
export const FACET_KEYS = Object.keys(Facets.properties) as FacetKey[];

/** An object with string keys and values of any JSON type. */
export const Manifest = Type.Record(Type.String(), Type.Unknown());
export type Manifest = Static<typeof Manifest>;

/** Items one page may hold (contract.md §8). */
export const MAX_PAGE_SIZE = 100;

export const PageQuery = {
  page: Type.Optional(
    Type.Integer({ minimum: 1, maximum: MAX_COUNTER, description: 'page number, default 1' }),
  ),
  pageSize: Type.Optional(
    Type.Integer({ minimum: 1, maximum: MAX_PAGE_SIZE, description: 'items per page, default 20' }),
  ),
};

export const DEFAULT_PAGE_SIZE = 20;

export const PageMeta = Type.Object({
  page: Type.Integer({ minimum: 1, maximum: MAX_COUNTER }),
  pageSize: Type.Integer({ minimum: 1, maximum: MAX_COUNTER }),
  pageCount: Counter,
  total: Counter,
});
export type PageMeta = Static<typeof PageMeta>;

/**
 * The pagination envelope both list operations share. Its title names it in the OpenAPI document
 * (`CatalogPage` for a page of `Catalog`): every body there is a named component.
 */
export function Page<T extends TSchema>(item: T, options: { description?: string } = {}) {
  const named = (item as { $ref?: unknown }).$ref ?? item.title;
  return Type.Object(
    { data: Type.Array(item, { maxItems: MAX_PAGE_SIZE }), meta: PageMeta },
    { ...(typeof named === 'string' ? { title: `${named}Page` } : {}), ...options },
  );
}

/**
 * Every `code` a problem document may carry (D2), each with its `title`: the one list of codes. The
 * OpenAPI document, the error handler and the docs page of each code all read it.
 */
export const PROBLEM_TITLES = {
  invalid_request: 'Invalid request',
  content_too_large: 'Content too large',
  unsupported_media_type: 'Unsupported media type',
  not_acceptable: 'Not acceptable',
  limit_reached: 'Limit reached',
  unauthenticated: 'Unauthenticated',
  forbidden: 'Forbidden',
  plan_required: 'Plan required',
  ip_not_allowed: 'Address not allowed',
  not_found: 'Not found',
  method_not_allowed: 'Method not allowed',
  key_inactive: 'Key not active',
  key_already_rolled: 'Key already rolled',
  endpoint_disabled: 'Webhook endpoint disabled',
  version_label_taken: 'Version label taken',
  precondition_failed: 'Precondition failed',
  invalid_sync_token: 'Invalid sync token',
  sync_token_expired: 'Sync token expired',
  request_timeout: 'Request timeout',
  expectation_failed: 'Expectation failed',
  headers_too_large: 'Request headers too large',
  rate_limited: 'Too many requests',
  internal: 'Internal error',
  not_implemented: 'Not implemented',
  unavailable: 'Service unavailable',
} as const;

export const PROBLEM_CODES = Object.keys(PROBLEM_TITLES) as (keyof typeof PROBLEM_TITLES)[];
export const ProblemCode = StringEnum(PROBLEM_CODES);
export type ProblemCode = Static<typeof ProblemCode>;

/** Where the docs page of a problem code is served: a path of this service. */
export const PROBLEM_DOCS_PATH = '/docs/problems';

/**
 * A problem document's `type` (RFC 9457 §3.1.1): a relative reference to the service's docs page
 * that explains `code`. Relative, so that it resolves against the URL of the request that got the
 * problem, whatever host, port or proxy the caller reached the service through.
 *
 * @example
 * problemTypeUrl('precondition_failed'); // '/docs/problems/precondition_failed'
 */
export function problemTypeUrl(code: ProblemCode): string {
  return `${PROBLEM_DOCS_PATH}/${code}`;
}

/** The request ids the service echoes (D2); any other is replaced by one it makes. */
export const REQUEST_ID_PATTERN = '^[A-Za-z0-9._:-]{1,128}$';

/** D20: a 400 lists this many problems at most, then says how many more there were. */
export const MAX_LISTED_PROBLEMS = 20;
/** The longest name or message of one listed problem: longer ones (a name the caller made up) are cut. */
export const MAX_PROBLEM_TEXT = 200;
/** The longest `detail` of a problem document. */
export const MAX_PROBLEM_DETAIL = 1000;

/** RFC 9457 problem document (D2). */
export const Problem = Type.Object(
  {
    type: Type.String({
      format: 'uri-reference',
      maxLength: 100,
      pattern: '^/docs/problems/[a-z_]+$',
      description:
        "the docs page that explains the code: a path of this service, resolved against the request's URL",
    }),
    title: Type.Unsafe<string>({
      type: 'string',
      enum: [...new Set(Object.values(PROBLEM_TITLES))],
      maxLength: 100,
      description: 'the title of the code, the same for every problem of it',
    }),
    status: Type.Integer({ minimum: 400, maximum: 599, description: 'the HTTP status of the answer' }),
    code: ProblemCode,
    detail: Type.String({ maxLength: MAX_PROBLEM_DETAIL }),
    requestId: Type.String({
      maxLength: 128,
      pattern: REQUEST_ID_PATTERN,
      description: 'the x-request-id of the answer',
    }),
    errors: Type.Optional(
      Type.Array(
        Type.Object({
          in: StringEnum(['query', 'path', 'body', 'header'] as const),
          name: Type.String({ maxLength: MAX_PROBLEM_TEXT, description: 'the parameter, field or header' }),
          message: Type.String({ maxLength: MAX_PROBLEM_TEXT }),
        }),
        { maxItems: MAX_LISTED_PROBLEMS, description: 'each problem of a 400, at most 20' },
      ),
    ),
    replacedBy: Type.Optional(
      Type.String({
        maxLength: 32,
        pattern: KEY_ID_PATTERN,
        description: 'key_already_rolled: the id of the key that replaced the one the request named',
      }),
    ),
  },
  { $id: 'Problem', description: 'RFC 9457 problem document' },
);
export type Problem = Static<typeof Problem>;

/** The 304 of a read whose If-None-Match names its current validator (D11): no body. */
export const notModifiedResponse = {
  304: Type.Null({ description: 'Not modified: If-None-Match names the validator of this representation' }),
};

/** The error answers an authenticated read may give, for the OpenAPI document. */
export function problemResponses(...statuses: number[]): Record<number, TSchema> {
  return Object.fromEntries(statuses.map((status) => [status, Type.Ref(Problem)]));
}
