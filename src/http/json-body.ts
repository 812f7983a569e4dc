import { isUtf8 } from 'node:buffer';
import type { Readable } from 'node:stream';
import { errorCodes, type FastifyRequest } from 'fastify';
import { InputError, UnsupportedMediaTypeError } from '../foundation/errors.js';
import { parseJsonParts, TooDeepError } from '../foundation/sliced-json.js';

/** D21: how deep a JSON body may nest, manifest and facets included. */
export const MAX_JSON_DEPTH = 64;

/**
 * Decodes a JSON body strictly (D21): bytes that are not UTF-8 are refused, never turned into
 * replacement characters and stored; nesting past {@link MAX_JSON_DEPTH} is refused before anything
 * else is done with the body. Every key is data, and nothing merges a body into another object. An
 * empty body is no body. A large body is read in slices, each followed by a turn of the event loop
 * when the work has held it for long (D20).
 */
export async function parseJsonBody(body: Buffer): Promise<unknown> {
  if (!isUtf8(body)) throw NOT_UTF8();
  return parseCheckedParts(body.length === 0 ? [] : [body]);
}

const NOT_UTF8 = () => InputError.of('body', '(body)', 'must be UTF-8');

/** {@link parseJsonBody} of a body already checked to be UTF-8, in the parts it arrived in; none is no body. */
async function parseCheckedParts(parts: readonly Buffer[]): Promise<unknown> {
  if (parts.length === 0) return undefined;
  try {
    return await parseJsonParts(parts, MAX_JSON_DEPTH);
  } catch (error) {
    if (error instanceof TooDeepError) {
      throw InputError.of('body', error.path || '(body)', `nests deeper than ${MAX_JSON_DEPTH} levels`);
    }
    throw InputError.of('body', '(body)', `is not valid JSON${whereOf(error)}`);
  }
}

/** What the parser names a token, in the words of JSON. */
const TOKEN_WORDS: Readonly<Record<string, string>> = {
  LEFT_BRACE: '"{"',
  RIGHT_BRACE: '"}"',
  LEFT_BRACKET: '"["',
  RIGHT_BRACKET: '"]"',
  COLON: '":"',
  COMMA: '","',
  TRUE: 'true',
  FALSE: 'false',
  NULL: 'null',
  STRING: 'string',
  NUMBER: 'number',
};

/**
 * Where and how the JSON text went wrong, as the parser's message says it but without the text it
 * quotes: that may be megabytes of the body (a whole string), or a credential.
 */
function whereOf(error: unknown): string {
  const message = error instanceof Error ? error.message : '';
  const position = /absolute position "(\d+)"/.exec(message);
  if (position) return ` (unexpected character at ${position[1]})`;
  const token = /^Unexpected ([A-Z_]+) /.exec(message)?.[1];
  if (token) {
    return / in state ENDED$/.test(message)
      ? ' (more follows the value)'
      : ` (unexpected ${TOKEN_WORDS[token] ?? 'value'})`;
  }
  return ' (it ends early)';
}

/** The `charset` parameter of a Content-Type, lowercased; undefined when there is none. */
function charsetOf(contentType: string | undefined): string | undefined {
  return /;\s*charset\s*=\s*"?([^";\s]+)"?/i.exec(contentType ?? '')?.[1]?.toLowerCase();
}

/**
 * JSON is UTF-8 (RFC 8259 §8.1): a body said to be in another charset is one the service does not
 * take (415), rather than bytes to guess at.
 */
function refusedCharset(request: FastifyRequest): UnsupportedMediaTypeError | undefined {
  const charset = charsetOf(request.headers['content-type']);
  if (charset === undefined || charset === 'utf-8' || charset === 'utf8') return undefined;
  return new UnsupportedMediaTypeError(
    `This operation takes JSON in UTF-8, not in ${charset}: send Content-Type: application/json.`,
  );
}

/** Fastify's content-type parser over {@link parseJsonBody}, for a route that keeps the body's bytes whole. */
export function jsonBodyParser(request: FastifyRequest, body: string | Buffer): Promise<unknown> {
  const refused = refusedCharset(request);
  return refused ? Promise.reject(refused) : parseJsonBody(body as Buffer);
}

/**
 * How many bytes at the end of `bytes` begin a character that the next part completes: a part of a
 * body ends wherever the network cut it, inside a character of two to four bytes as well.
 */
function unfinishedCharacter(bytes: Uint8Array): number {
  for (let back = 1; back <= Math.min(3, bytes.length); back++) {
    const byte = bytes[bytes.length - back]!;
    // A continuation byte: the character began further back.
    if ((byte & 0xc0) === 0x80) continue;
    const length = byte >= 0xf0 ? 4 : byte >= 0xe0 ? 3 : byte >= 0xc0 ? 2 : 1;
    return length > back ? back : 0;
  }
  return 0;
}

/**
 * Fastify's content-type parser over {@link parseJsonBody}, reading the body as it arrives: each part
 * is checked to be UTF-8 when it comes, and the body is parsed in the parts it came in, never joined. A body of
 * tens of megabytes (a published Catalog) was copied whole into one buffer before parsing, a stretch
 * of 40 ms and more during which no other request was answered (D20). Its limits are Fastify's for
 * a body it reads itself: past the route's limit, by Content-Length or as it arrives, 413; a body
 * that does not match its Content-Length, 400. Every byte is checked before any is parsed (D21).
 */
export function streamedJsonBodyParser(request: FastifyRequest, payload: Readable): Promise<unknown> {
  const refused = refusedCharset(request);
  if (refused) return Promise.reject(refused);
  const limit = request.routeOptions.bodyLimit ?? Number.POSITIVE_INFINITY;
  const declared = Number(request.headers['content-length']);
  if (declared > limit) return Promise.reject(new errorCodes.FST_ERR_CTP_BODY_TOO_LARGE());
  return new Promise<Buffer[]>((resolve, reject) => {
    const parts: Buffer[] = [];
    let received = 0;
    let utf8 = true;
    // The first bytes of a character that the next part completes, checked with it.
    let unfinished: Buffer | undefined;
    const settle = () => {
      payload.removeListener('data', onData);
      payload.removeListener('end', onEnd);
      payload.removeListener('error', onEnd);
    };
    const onData = (chunk: Buffer | string) => {
      const part = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
      received += part.length;
      if (received > limit) {
        settle();
        reject(new errorCodes.FST_ERR_CTP_BODY_TOO_LARGE());
        return;
      }
      parts.push(part);
      if (!utf8) return;
      const checked = unfinished ? Buffer.concat([unfinished, part]) : part;
      const tail = unfinishedCharacter(checked);
      utf8 = isUtf8(checked.subarray(0, checked.length - tail));
      unfinished = tail > 0 ? checked.subarray(checked.length - tail) : undefined;
    };
    const onEnd = (error?: Error & { statusCode?: number }) => {
      settle();
      if (error) {
        if (!(typeof error.statusCode === 'number' && error.statusCode >= 400)) error.statusCode = 400;
        reject(error);
        return;
      }
      if (!Number.isNaN(declared) && received !== declared) {
        reject(new errorCodes.FST_ERR_CTP_INVALID_CONTENT_LENGTH());
        return;
      }
      if (!utf8 || unfinished) reject(NOT_UTF8());
      else resolve(parts);
    };
    payload.on('data', onData);
    payload.on('end', onEnd);
    payload.on('error', onEnd);
    payload.resume();
  }).then(parseCheckedParts);
}
