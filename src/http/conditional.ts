/**
 * Conditional requests (RFC 9110 §13): the one place that makes entity tags, reads `If-Match` and
 * `If-None-Match`, and compares them. Reads answer 304 when `If-None-Match` names the tag of the
 * representation they would send (weak comparison); writes go ahead only when `If-Match` names the
 * object's current state (strong comparison: a weak tag never matches) and, with `If-None-Match: *`,
 * only when nothing exists yet.
 *
 * Each content encoding of an answer is a representation of its own, with a strong tag of its own
 * (D19): the identity form's `"<tag>"`, and `"<tag>-br"`, `"<tag>-gzip"`. All of them are of one state
 * of the object, so a write takes any of them in `If-Match` (D29): a client that read the object
 * compressed sends back what it was given.
 */

/** The content codings the service answers in, each a representation with its own tag (D19). */
export const CONTENT_CODINGS = ['br', 'gzip'] as const;
export type ContentCoding = (typeof CONTENT_CODINGS)[number];

/**
 * The entity tag of one representation of what `tag` stands for: the identity form's, or a coded
 * form's, derived from it.
 *
 * @example
 * representationTag('rAbc'); // '"rAbc"'
 * representationTag('rAbc', 'br'); // '"rAbc-br"'
 */
export function representationTag(tag: string, coding?: ContentCoding): string {
  return coding === undefined ? `"${tag}"` : `"${tag}-${coding}"`;
}

/** The tags of every representation of the state whose identity form is tagged `etag` (`"…"`). */
function representationsOf(etag: string): string[] {
  const tag = etag.slice(1, -1);
  return [etag, ...CONTENT_CODINGS.map((coding) => representationTag(tag, coding))];
}

/** One entity tag of a list: its opaque tag with the quotes, and whether it was sent weak (`W/`). */
export interface EntityTag {
  readonly weak: boolean;
  readonly opaque: string;
}

/** What a conditional header holds: `*`, or a list of entity tags. */
export type EntityTags = '*' | readonly EntityTag[];

/**
 * Parses `If-Match` or `If-None-Match` as RFC 9110 defines them: `*`, or a comma-separated list of
 * entity tags (`"…"` or `W/"…"`), where the quoted part may hold commas and empty list elements are
 * allowed. Undefined when the value is none of these: a condition that cannot be read.
 *
 * @example
 * parseEntityTags('W/"a", "b,c"'); // [{ weak: true, opaque: '"a"' }, { weak: false, opaque: '"b,c"' }]
 */
export function parseEntityTags(header: string): EntityTags | undefined {
  const value = header.trim();
  if (value === '*') return '*';
  const tags: EntityTag[] = [];
  let at = 0;
  while (at < value.length) {
    const char = value[at];
    if (char === ',' || char === ' ' || char === '\t') {
      at++;
      continue;
    }
    const weak = value.startsWith('W/', at);
    const open = weak ? at + 2 : at;
    if (value[open] !== '"') return undefined;
    const close = value.indexOf('"', open + 1);
    if (close < 0) return undefined;
    const opaque = value.slice(open, close + 1);
    // etagc: any visible character but the quote, and obs-text; no controls, no spaces.
    if (!/^"[\x21\x23-\x7e\x80-\xff]*"$/.test(opaque)) return undefined;
    tags.push({ weak, opaque });
    at = close + 1;
    // After a tag: optional whitespace, then a comma or the end.
    while (value[at] === ' ' || value[at] === '\t') at++;
    if (at < value.length && value[at] !== ',') return undefined;
  }
  return tags.length > 0 ? tags : undefined;
}

/** The opaque part of one of our own tags (`"…"` or `W/"…"`). */
function opaqueOf(etag: string): string {
  return etag.startsWith('W/') ? etag.slice(2) : etag;
}

/**
 * `If-None-Match` of a read against the tag of the representation it would send, by weak comparison
 * (what RFC 9110 asks for GET and HEAD): true when `*` or a listed tag names it, weak or not. A value
 * that cannot be read matches nothing.
 */
export function noneMatchNames(header: string | undefined, etag: string): boolean {
  if (header === undefined || header === '') return false;
  const tags = parseEntityTags(header);
  if (tags === undefined) return false;
  if (tags === '*') return true;
  const opaque = opaqueOf(etag);
  return tags.some((tag) => tag.opaque === opaque);
}

/**
 * `If-None-Match` of a write against what is stored, whose identity tag is `current`: by weak
 * comparison, as for a read, naming any representation of it (RFC 9110 §13.1.2).
 */
export function noneMatchNamesState(header: string, current: string): boolean {
  return representationsOf(current).some((etag) => noneMatchNames(header, etag));
}

/** Whether `If-None-Match` is `*`: the write may only create. */
export function createOnly(header: string | undefined): boolean {
  return header !== undefined && parseEntityTags(header) === '*';
}

/**
 * `If-Match` against the current state of what a write changes, whose identity tag is `current`
 * (`undefined` when it does not exist), by strong comparison: `*` holds when something exists; a
 * listed tag holds when it is strong and is the tag of a representation of that state, in any
 * encoding. A weak tag never holds, and a value that cannot be read does not either.
 */
export function matchHolds(header: string, current: string | undefined): boolean {
  const tags = parseEntityTags(header);
  if (tags === undefined || current === undefined) return false;
  if (tags === '*') return true;
  if (current.startsWith('W/')) return false;
  const representations = representationsOf(current);
  return tags.some((tag) => !tag.weak && representations.includes(tag.opaque));
}
