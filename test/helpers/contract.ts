/**
 * Checks of answers against contract.md §2 and decisions.md D2, written from the documents and not
 * from the service's schemas, so that a wrong schema cannot make its own answers look right.
 *
 * Each checker returns a list of violations, each naming the JSON path it found wrong; an empty list
 * means the value honours the contract. Tests assert `toEqual([])`, so a failure prints every problem.
 */

export type Violations = string[];
type Check = (value: unknown, path: string) => Violations;

const MAX_COUNTER = 9007199254740991;

// Formats (contract.md §2 "Common formats")

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[1-8][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/i;
const NIL_UUID = '00000000-0000-0000-0000-000000000000';
const MAX_UUID = 'ffffffff-ffff-ffff-ffff-ffffffffffff';

export function isUuid(value: unknown): boolean {
  if (typeof value !== 'string') return false;
  return UUID.test(value) || value === NIL_UUID || value.toLowerCase() === MAX_UUID;
}

const DATE_TIME = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2})(?:\.\d+)?)?Z$/;

export function isLeapYear(year: number): boolean {
  return (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0;
}

export function daysInMonth(year: number, month: number): number {
  if (month === 2) return isLeapYear(year) ? 29 : 28;
  return [4, 6, 9, 11].includes(month) ? 30 : 31;
}

/** UTC `Z` timestamps on real calendar dates; a leap second is allowed only at 23:59. */
export function isDateTime(value: unknown): boolean {
  if (typeof value !== 'string') return false;
  const match = DATE_TIME.exec(value);
  if (!match) return false;
  const [year, month, day, hour, minute] = match.slice(1, 6).map(Number) as [
    number,
    number,
    number,
    number,
    number,
  ];
  const second = match[6] === undefined ? 0 : Number(match[6]);
  if (month < 1 || month > 12) return false;
  if (day < 1 || day > daysInMonth(year, month)) return false;
  if (hour > 23 || minute > 59) return false;
  if (second > 60 || (second === 60 && (hour !== 23 || minute !== 59))) return false;
  return true;
}

const SLUG = /^[a-z0-9]+(?:-[a-z0-9]+)*$/;

export function isSlug(value: unknown, maxLength = 120): boolean {
  return typeof value === 'string' && value.length >= 1 && value.length <= maxLength && SLUG.test(value);
}

export function isHash(value: unknown): boolean {
  return typeof value === 'string' && value.length >= 32 && value.length <= 128;
}

export function isCounter(value: unknown, minimum = 0): boolean {
  return Number.isInteger(value) && (value as number) >= minimum && (value as number) <= MAX_COUNTER;
}

// Building blocks

function fails(test: (value: unknown) => boolean, what: string): Check {
  return (value, path) => (test(value) ? [] : [`${path}: ${JSON.stringify(value)} is not ${what}`]);
}

const uuid = fails(isUuid, 'a uuid');
const dateTime = fails(isDateTime, 'a UTC date-time on a real calendar date');
const slug = fails((v) => isSlug(v), 'a slug of 1-120 characters');
const facetValue = fails((v) => isSlug(v, 80), 'a facet value (slug of 1-80 characters)');
const hash = fails(isHash, 'a hash of 32-128 characters');
const counter = fails((v) => isCounter(v), 'an integer counter 0-9007199254740991');

function text(min: number, max: number, pattern?: RegExp): Check {
  return fails(
    (v) => typeof v === 'string' && v.length >= min && v.length <= max && (!pattern || pattern.test(v)),
    `a string of ${min}-${max} characters${pattern ? ` matching ${pattern}` : ''}`,
  );
}

function oneOf(...values: string[]): Check {
  return fails((v) => typeof v === 'string' && values.includes(v), `one of ${values.join(', ')}`);
}

function arrayOf(item: Check): Check {
  return (value, path) =>
    Array.isArray(value)
      ? value.flatMap((element, index) => item(element, `${path}[${index}]`))
      : [`${path}: is not an array`];
}

/** An object with string keys and arbitrary values. */
const stringKeyedObject: Check = (value, path) =>
  typeof value === 'object' && value !== null && !Array.isArray(value) ? [] : [`${path}: is not an object`];

interface Field {
  readonly check: Check;
  readonly required: boolean;
}
const required = (check: Check): Field => ({ check, required: true });
const optional = (check: Check): Field => ({ check, required: false });
/** A field that must not be present at all (list items' `manifest`/`content`). */
const ABSENT: Field = { check: (_v, path) => [`${path}: must be absent`], required: false };

/**
 * An object with exactly these fields: required ones present, optional ones absent rather than null,
 * and nothing else (no account ids, storage keys or other internals).
 */
function object(fields: Record<string, Field>): Check {
  return (value, path) => {
    if (typeof value !== 'object' || value === null || Array.isArray(value))
      return [`${path}: is not an object`];
    const record = value as Record<string, unknown>;
    const violations: Violations = [];
    for (const [name, field] of Object.entries(fields)) {
      const at = `${path}.${name}`;
      if (!(name in record)) {
        if (field.required) violations.push(`${at}: is required`);
      } else if (record[name] === null && field !== ABSENT) {
        violations.push(`${at}: is null (an optional field must be absent instead)`);
      } else {
        violations.push(...field.check(record[name], at));
      }
    }
    for (const name of Object.keys(record)) {
      if (!(name in fields)) violations.push(`${path}.${name}: is not a field of the contract`);
    }
    return violations;
  };
}

// Objects of contract.md §2

const OWNER_REF = /^(svc|org)\/[a-z0-9]+(?:-[a-z0-9]+)*$/;
const RESOURCE_REF = /^(svc|org)\/[a-z0-9]+(?:-[a-z0-9]+)*\/[a-z0-9]+(?:-[a-z0-9]+)*$/;

const facets = object({
  capability: optional(arrayOf(facetValue)),
  channel: optional(arrayOf(facetValue)),
  framework: optional(arrayOf(facetValue)),
  planAccess: optional(arrayOf(facetValue)),
  technology: optional(arrayOf(facetValue)),
});

const resourcePin = object({
  resourceId: required(uuid),
  resourceHumanRef: required(text(5, 260, RESOURCE_REF)),
  resourceVersionId: required(uuid),
  version: required(text(1, 80)),
  contentHash: required(hash),
});

const catalogVersion = object({
  id: required(uuid),
  version: required(text(1, 80)),
  resourcePins: required(arrayOf(resourcePin)),
  manifestHash: required(hash),
  resourceCount: required(counter),
  publishedAt: optional(dateTime),
});

const lifecycle = oneOf('draft', 'active', 'archived');
const sourceScope = oneOf('svc', 'account');

/** A Catalog also has to agree with itself: `humanRef` is `<owner>/<slug>`, owner matches the scope. */
const catalogFields = object({
  id: required(uuid),
  sourceScope: required(sourceScope),
  owner: required(oneOf('svc', 'org')),
  slug: required(slug),
  humanRef: required(text(3, 180, OWNER_REF)),
  name: required(text(1, 160)),
  status: required(lifecycle),
  createdAt: required(dateTime),
  updatedAt: required(dateTime),
  archivedAt: optional(dateTime),
  description: optional(text(0, 1000)),
  facets: optional(facets),
  currentVersion: optional(catalogVersion),
});

export const checkCatalog: Check = (value, path = 'catalog') => {
  const violations = catalogFields(value, path);
  if (violations.length > 0) return violations;
  const c = value as { owner: string; slug: string; humanRef: string; sourceScope: string };
  if (c.humanRef !== `${c.owner}/${c.slug}`) violations.push(`${path}.humanRef: is not <owner>/<slug>`);
  if ((c.owner === 'svc') !== (c.sourceScope === 'svc')) {
    violations.push(`${path}: owner ${c.owner} disagrees with sourceScope ${c.sourceScope}`);
  }
  return violations;
};

const versionStatus = oneOf('draft', 'published', 'superseded', 'archived');

const summaryFields = {
  id: required(uuid),
  version: required(text(1, 80)),
  contentHash: required(hash),
  contentSizeBytes: required(counter),
  mediaType: required(text(1, 120)),
  storageBackend: required(oneOf('object-storage', 'database-text')),
  status: required(versionStatus),
  publishedAt: optional(dateTime),
  supersededAt: optional(dateTime),
  archivedAt: optional(dateTime),
};

/** A version as list items and the history list carry it: no `manifest`, no `content`. */
export const checkVersionSummary: Check = object({ ...summaryFields, manifest: ABSENT, content: ABSENT });

/** A version as the detail and version-detail answers carry it: every field. */
export const checkVersionDetail: Check = object({
  ...summaryFields,
  manifest: required(stringKeyedObject),
  content: required(fails((v) => typeof v === 'string', 'a string')),
});

function resourceCheck(currentVersion: Field): Check {
  const fields = object({
    id: required(uuid),
    catalogId: required(uuid),
    catalogHumanRef: required(text(3, 180, OWNER_REF)),
    sourceScope: required(sourceScope),
    slug: required(slug),
    humanRef: required(text(5, 260, RESOURCE_REF)),
    kind: required(
      oneOf(
        'document',
        'topic',
        'reference',
        'team-member',
        'workflow',
        'lifecycle',
        'integration',
        'policy',
      ),
    ),
    title: required(text(1, 220)),
    status: required(lifecycle),
    manifest: required(stringKeyedObject),
    createdAt: required(dateTime),
    updatedAt: required(dateTime),
    archivedAt: optional(dateTime),
    description: optional(text(0, 1000)),
    facets: optional(facets),
    currentVersion,
  });
  return (value, path) => {
    const violations = fields(value, path);
    if (violations.length > 0) return violations;
    const r = value as { humanRef: string; catalogHumanRef: string; slug: string; sourceScope: string };
    if (r.humanRef !== `${r.catalogHumanRef}/${r.slug}`) {
      violations.push(`${path}.humanRef: is not <catalogHumanRef>/<slug>`);
    }
    if (r.catalogHumanRef.startsWith('svc/') !== (r.sourceScope === 'svc')) {
      violations.push(`${path}: catalogHumanRef disagrees with sourceScope ${r.sourceScope}`);
    }
    return violations;
  };
}

export const checkResourceListItem: Check = resourceCheck(optional(checkVersionSummary));
export const checkResourceDetail: Check = resourceCheck(required(checkVersionDetail));

/** The pagination envelope, its items checked by `item`, and its meta consistent with itself (D3). */
export function checkPage(value: unknown, item: Check): Violations {
  const envelope = object({
    data: required(arrayOf(item)),
    meta: required(
      object({
        page: required(fails((v) => isCounter(v, 1), 'an integer 1-9007199254740991')),
        pageSize: required(fails((v) => isCounter(v, 1), 'an integer 1-9007199254740991')),
        pageCount: required(counter),
        total: required(counter),
      }),
    ),
  });
  const violations = envelope(value, 'page');
  if (violations.length > 0) return violations;
  const { data, meta } = value as {
    data: unknown[];
    meta: { page: number; pageSize: number; pageCount: number; total: number };
  };
  if (meta.pageCount !== Math.ceil(meta.total / meta.pageSize)) {
    violations.push('page.meta.pageCount: is not ceil(total / pageSize)');
  }
  const expected = Math.max(0, Math.min(meta.pageSize, meta.total - (meta.page - 1) * meta.pageSize));
  if (data.length !== expected) violations.push(`page.data: has ${data.length} items, expected ${expected}`);
  return violations;
}

// Problem documents (D2)

const PROBLEM_CODES = [
  'invalid_request',
  'content_too_large',
  'unsupported_media_type',
  'not_acceptable',
  'limit_reached',
  'unauthenticated',
  'forbidden',
  'plan_required',
  'not_found',
  'method_not_allowed',
  'key_inactive',
  'key_already_rolled',
  'endpoint_disabled',
  'version_label_taken',
  'precondition_failed',
  'invalid_sync_token',
  'sync_token_expired',
  'request_timeout',
  'expectation_failed',
  'headers_too_large',
  'rate_limited',
  'internal',
  'not_implemented',
  'unavailable',
];

const inputProblem = object({
  in: required(oneOf('query', 'path', 'body', 'header')),
  name: required(text(1, 1000)),
  message: required(text(1, 1000)),
});

const problemFields = object({
  type: required(text(1, 2000)),
  title: required(text(1, 200)),
  status: required(
    fails((v) => Number.isInteger(v) && (v as number) >= 400 && (v as number) <= 599, 'a status'),
  ),
  code: required(oneOf(...PROBLEM_CODES)),
  detail: required(fails((v) => typeof v === 'string', 'a string')),
  requestId: required(text(1, 200)),
  errors: optional(arrayOf(inputProblem)),
});

export interface ProblemDocument {
  type: string;
  title: string;
  status: number;
  code: string;
  detail: string;
  requestId: string;
  errors?: { in: string; name: string; message: string }[];
}

/** What an error answer looked like; filled from `app.inject`'s response. */
export interface Answer {
  statusCode: number;
  headers: Record<string, string | string[] | number | undefined>;
  body: string;
}

/**
 * Violations of D2 in an error answer: the problem content type, the document's fields, its status
 * and code, the request id of the answer's header, an `errors` list on every 400 and nowhere else
 * required, and nothing that looks like a stack trace, SQL or a file path.
 */
export function checkProblem(answer: Answer, status: number, code: string): Violations {
  const violations: Violations = [];
  if (answer.statusCode !== status) violations.push(`status: ${answer.statusCode}, expected ${status}`);
  const contentType = String(answer.headers['content-type'] ?? '');
  if (!contentType.startsWith('application/problem+json')) {
    violations.push(`content-type: ${contentType} is not application/problem+json`);
  }
  let body: unknown;
  try {
    body = JSON.parse(answer.body);
  } catch {
    return [...violations, 'body: is not JSON'];
  }
  violations.push(...problemFields(body, 'problem'));
  const doc = body as Partial<ProblemDocument>;
  if (doc.status !== status) violations.push(`problem.status: ${doc.status}, expected ${status}`);
  if (doc.code !== code) violations.push(`problem.code: ${doc.code}, expected ${code}`);
  // D29: the type is the service's docs page of the code, relative to the request's URL.
  if (doc.type !== `/docs/problems/${doc.code}`) violations.push(`problem.type: ${doc.type}`);
  // RFC 9110 §11.6.1 and §10.2.3, as D29 asks of every 401 and 503.
  if (status === 401 && !answer.headers['www-authenticate']) violations.push('401 without WWW-Authenticate');
  if (status === 503 && !/^\d+$/.test(String(answer.headers['retry-after'] ?? ''))) {
    violations.push('503 without Retry-After');
  }
  if (doc.requestId !== answer.headers['x-request-id']) {
    violations.push('problem.requestId: differs from the x-request-id header');
  }
  if (status === 400 && (!doc.errors || doc.errors.length === 0)) {
    violations.push('problem.errors: a 400 must list its problems');
  }
  const leaks = /\bat .+:\d+:\d+|\bselect\b.+\bfrom\b|\/tmp\/|node_modules|\.sqlite|\bSQLITE_/i;
  if (leaks.test(answer.body)) violations.push(`body: leaks internals: ${answer.body}`);
  return violations;
}

/** The problem document of an answer, for tests that look further at its `errors`. */
export function problemOf(answer: Answer): ProblemDocument {
  return JSON.parse(answer.body) as ProblemDocument;
}
