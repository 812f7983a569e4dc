/**
 * Conditional requests (RFC 9110 §13): the one place that reads `If-Match` and `If-None-Match` and
 * compares entity tags. Reads answer 304 when `If-None-Match` names their tag (weak comparison); writes
 * go ahead only when `If-Match` names the current tag (strong comparison: a weak tag never matches)
 * and, with `If-None-Match: *`, only when nothing exists yet.
 */

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
 * `If-None-Match` against the current representation's tag, by weak comparison (what RFC 9110 asks
 * for GET and HEAD): true when `*` or a listed tag names it, weak or not. A value that cannot be read
 * matches nothing.
 */
export function noneMatchNames(header: string | undefined, etag: string): boolean {
  if (header === undefined || header === '') return false;
  const tags = parseEntityTags(header);
  if (tags === undefined) return false;
  if (tags === '*') return true;
  const opaque = opaqueOf(etag);
  return tags.some((tag) => tag.opaque === opaque);
}

/** Whether `If-None-Match` is `*`: the write may only create. */
export function createOnly(header: string | undefined): boolean {
  return header !== undefined && parseEntityTags(header) === '*';
}

/**
 * `If-Match` against the current tag of what a write changes (`undefined` when it does not exist), by
 * strong comparison: `*` holds when something exists; a listed tag holds when it is strong and equal
 * to a strong current tag. A weak tag never holds, and a value that cannot be read does not either.
 */
export function matchHolds(header: string, current: string | undefined): boolean {
  const tags = parseEntityTags(header);
  if (tags === undefined || current === undefined) return false;
  if (tags === '*') return true;
  if (current.startsWith('W/')) return false;
  return tags.some((tag) => !tag.weak && tag.opaque === current);
}
