import { API_KEY_PREFIX } from '../schemas/api-key-format.js';

/**
 * D21: no credential is ever logged, traced or echoed. Whatever the service writes about a request
 * (its access line, an error log, a span, a problem document) goes through here, so that the rule
 * lives once: a run of text that has the form of an API key (D8) or of a compact JWS (D9's access
 * tokens) is written `[redacted]`, wherever it sits and under whatever name, and the value of a query
 * parameter with one of D21's credential names is written `[redacted]` whatever it holds.
 *
 * Recognised by form rather than by name because a caller may put a credential anywhere: a path
 * segment, a value under any name, inside another value (`a=1?api_key=…`, `Bearer%20eyJ…`), or as
 * the name itself. Escapes are undone before looking, so that `svc%5Fsk%5Ftest…` is found too, and
 * the credential's whole run in the text as sent is replaced.
 */

export const REDACTED = '[redacted]';

/** Query parameters that may carry a credential (D21): their values are never written. */
export const CREDENTIAL_PARAMETERS: ReadonlySet<string> = new Set([
  'api_key',
  'apikey',
  'x-api-key',
  'key',
  'token',
  'access_token',
]);

/** What a query naming a credential parameter must contain: each of D21's names holds `key` or `token`. */
const MAY_NAME_CREDENTIAL = /key|token|%/gi;
/** Where a parameter's name ends, or a name starts after: a `?` too, for a query nested in a value. */
const NAME_END = /[&?=]/g;
const NAME_START = /[&?]/g;

/**
 * An API key's run (D8), generous: the prefix and every word character after it, so that a key cut
 * short, glued to other text or followed by more is still covered whole.
 */
const KEY_RUN = new RegExp(`${API_KEY_PREFIX}\\w*`, 'g');
/**
 * Base64url parts joined by dots, at least three of them: where a JWS (three) or a JWE (five) may be.
 * Only from the start of a run, which keeps the search linear in the length of the text.
 */
const DOTTED_RUN = /(?<![\w-])[\w-]+(?:\.[\w-]*){2,}/g;
/** How much of a part is decoded to tell a JSON header: `{`, up to 16 bytes of white space, then `"`. */
const HEADER_PREFIX_CHARS = 24;
/**
 * Escapes are undone this many times at most: enough for a value escaped twice or three times on its
 * way, while a URL of nested `%25` costs bounded work.
 */
const MAX_UNESCAPE_ROUNDS = 3;
const ESCAPE = /%[0-9A-Fa-f]{2}/;

/** A run of the text as written: `[start, end)`. */
type Span = readonly [number, number];

/**
 * A URL (path and query, as a request line carries it) as it may be written: every credential-shaped
 * run, and the value of every query parameter with a credential name, replaced by `[redacted]`.
 *
 * @example
 * redactUrl('/v3/x?a=1&api-key=svc_sk_test_…') // '/v3/x?a=1&api-key=[redacted]'
 */
export function redactUrl(url: string): string {
  const query = url.indexOf('?');
  const named = query !== -1 && namesMayBeCredentials(url, query);
  const formed = mayHoldForm(url);
  if (!named && !formed) return url;
  return replaced(url, [...(named ? namedValues(url, query) : []), ...(formed ? credentialRuns(url) : [])]);
}

/**
 * Any other text that may quote a request (a problem's detail, an error's message, a header echoed):
 * every credential-shaped run replaced by `[redacted]`.
 */
export function redactCredentials(text: string): string {
  if (!mayHoldForm(text)) return text;
  return replaced(text, credentialRuns(text));
}

/** Whether `text` holds a credential-shaped run anywhere, escaped or not. */
export function holdsCredential(text: string): boolean {
  return mayHoldForm(text) && credentialRuns(text).length > 0;
}

/**
 * Whether `text` may hold a credential's form, as sent or with its escapes undone: a test that costs
 * a few string searches, because the access line runs it on every request and almost no URL passes
 * it. It errs only towards looking closer.
 */
function mayHoldForm(text: string): boolean {
  if (text.includes('_sk_') || mayHoldJws(text)) return true;
  if (!text.includes('%')) return false;
  let plain: string;
  try {
    plain = decodeURIComponent(text);
  } catch {
    return true;
  }
  // An escape left after one round was escaped twice: it may hide anything.
  return plain.includes('_sk_') || plain.includes('%') || mayHoldJws(plain);
}

/**
 * A JWS header's start, a JSON object's `{` then `"` or white space, encodes as `ey` or `ew`, and its
 * parts are joined by dots. Plain searches, each linear in the text: a pattern that looked for the
 * header and its dot together took time growing with the square of a run of look-alikes (`eyey…`).
 */
function mayHoldJws(text: string): boolean {
  return text.includes('.') && (text.includes('ey') || text.includes('ew'));
}

function namesMayBeCredentials(url: string, query: number): boolean {
  MAY_NAME_CREDENTIAL.lastIndex = query;
  return MAY_NAME_CREDENTIAL.test(url);
}

/**
 * The values of the query's parameters named as credentials (D21), in any case or escaping of the
 * name, and of such parameters in a query nested in a value (`a=1?api_key=…`). A value runs to the
 * next `&`, as the service parses it, so that none of it is left out.
 */
function namedValues(url: string, query: number): Span[] {
  const spans: Span[] = [];
  let start = query + 1;
  let valueEnd = -1;
  for (;;) {
    NAME_END.lastIndex = start;
    const nameEnd = NAME_END.exec(url);
    if (nameEnd === null) return spans;
    if (nameEnd[0] !== '=') {
      start = nameEnd.index + 1;
      continue;
    }
    const equals = nameEnd.index;
    // Looked for again only once passed: many names before one `&` cost one search.
    if (valueEnd < equals) {
      const ampersand = url.indexOf('&', equals);
      valueEnd = ampersand === -1 ? url.length : ampersand;
    }
    if (valueEnd > equals + 1 && isCredentialName(url.slice(start, equals)))
      spans.push([equals + 1, valueEnd]);
    NAME_START.lastIndex = equals + 1;
    const next = NAME_START.exec(url);
    if (next === null) return spans;
    start = next.index + 1;
  }
}

function isCredentialName(sent: string): boolean {
  let name = sent;
  if (name.includes('%') || name.includes('+')) {
    try {
      name = decodeURIComponent(name.replaceAll('+', ' '));
    } catch {
      // An undecodable name names no credential parameter; a credential in it is found by form.
    }
  }
  return CREDENTIAL_PARAMETERS.has(name.toLowerCase());
}

/** Where `text` holds a credential-shaped run, looked for with escapes undone, as runs of `text` itself. */
function credentialRuns(text: string): Span[] {
  let view = text;
  // For each character of `view`, where it came from in `text`; absent while nothing was unescaped.
  let from: Int32Array | undefined;
  let to: Int32Array | undefined;
  const spans: Span[] = [];
  for (let round = 0; ; round++) {
    for (const [start, end] of runsIn(view)) {
      spans.push(from && to ? [from[start]!, to[end - 1]!] : [start, end]);
    }
    if (round === MAX_UNESCAPE_ROUNDS || !ESCAPE.test(view)) return spans;
    ({ view, from, to } = unescaped(view, from, to));
  }
}

/**
 * `text` with each `%XX` made the byte it stands for (a non-ASCII byte stays a character no credential
 * holds), and where each character came from in the original text.
 */
function unescaped(
  text: string,
  from: Int32Array | undefined,
  to: Int32Array | undefined,
): { view: string; from: Int32Array; to: Int32Array } {
  let view = '';
  let copied = 0;
  let length = 0;
  const starts = new Int32Array(text.length);
  const ends = new Int32Array(text.length);
  for (let i = 0; i < text.length; ) {
    const escaped =
      text.charCodeAt(i) === PERCENT && isHex(text.charCodeAt(i + 1)) && isHex(text.charCodeAt(i + 2));
    const width = escaped ? 3 : 1;
    if (escaped) {
      view += text.slice(copied, i) + String.fromCharCode(Number.parseInt(text.slice(i + 1, i + 3), 16));
      copied = i + 3;
    }
    starts[length] = from ? from[i]! : i;
    ends[length] = to ? to[i + width - 1]! : i + width;
    length++;
    i += width;
  }
  view += text.slice(copied);
  return { view, from: starts.subarray(0, length), to: ends.subarray(0, length) };
}

const PERCENT = 0x25;

function isHex(code: number): boolean {
  return (code >= 0x30 && code <= 0x39) || (code >= 0x41 && code <= 0x46) || (code >= 0x61 && code <= 0x66);
}

/** Credential-shaped runs of `text` as it is: API keys, and dotted runs from a JSON header on. */
function runsIn(text: string): Span[] {
  const spans: Span[] = [];
  if (text.includes(API_KEY_PREFIX)) {
    for (const match of text.matchAll(KEY_RUN)) spans.push([match.index, match.index + match[0].length]);
  }
  if (text.includes('.')) {
    for (const match of text.matchAll(DOTTED_RUN)) {
      const header = jwsHeaderAt(match[0]);
      // From the header to the end of the run: the payload, the signature and any parts after them.
      if (header !== -1) spans.push([match.index + header, match.index + match[0].length]);
    }
  }
  return spans;
}

/**
 * Where a JWS starts in a dotted run: the first part that is followed by two more and whose decoding
 * starts as a JSON object with a member, `{"` (D9's tokens: `eyJ`) or with white space before it. A
 * header glued to other base64url characters is found inside its part.
 */
function jwsHeaderAt(run: string): number {
  const parts = run.split('.');
  let offset = 0;
  for (let i = 0; i + 2 < parts.length; i++) {
    const part = parts[i]!;
    for (let e = part.indexOf('e'); e !== -1; e = part.indexOf('e', e + 1)) {
      if (startsJsonObject(part, e)) return offset + e;
    }
    offset += part.length + 1;
  }
  return -1;
}

/**
 * Whether the base64url text at `at` decodes to `{`, white space, then `"`. Decoded a byte at a time
 * and given up at the first that does not fit, so that a run of look-alikes (`eyeyey…`) costs a few
 * characters each.
 */
function startsJsonObject(text: string, at: number): boolean {
  let bits = 0;
  let pending = 0;
  let bytes = 0;
  const end = Math.min(text.length, at + HEADER_PREFIX_CHARS);
  for (let i = at; i < end; i++) {
    const sextet = base64urlValue(text.charCodeAt(i));
    if (sextet === -1) return false;
    bits = ((bits << 6) | sextet) & 0xfff;
    pending += 6;
    if (pending < 8) continue;
    pending -= 8;
    const byte = (bits >> pending) & 0xff;
    if (bytes++ === 0) {
      if (byte !== 0x7b) return false;
    } else if (byte === 0x22) {
      return true;
    } else if (byte !== 0x20 && byte !== 0x09 && byte !== 0x0a && byte !== 0x0d) {
      return false;
    }
  }
  return false;
}

function base64urlValue(code: number): number {
  if (code >= 0x41 && code <= 0x5a) return code - 0x41;
  if (code >= 0x61 && code <= 0x7a) return code - 0x61 + 26;
  if (code >= 0x30 && code <= 0x39) return code - 0x30 + 52;
  if (code === 0x2d) return 62;
  if (code === 0x5f) return 63;
  return -1;
}

/** `text` with the given runs (which may overlap) written `[redacted]`, one marker where they touch. */
function replaced(text: string, spans: Span[]): string {
  if (spans.length === 0) return text;
  spans.sort((a, b) => a[0] - b[0]);
  let written = '';
  let at = 0;
  let end = -1;
  for (const span of spans) {
    if (span[0] <= end) {
      end = Math.max(end, span[1]);
      continue;
    }
    if (end !== -1) at = end;
    written += `${text.slice(at, span[0])}${REDACTED}`;
    end = span[1];
  }
  return written + text.slice(end);
}
