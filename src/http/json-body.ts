import { isUtf8 } from 'node:buffer';
import type { FastifyRequest } from 'fastify';
import { InputError, UnsupportedMediaTypeError } from '../foundation/errors.js';
import { parseJsonInSlices, TooDeepError } from '../foundation/sliced-json.js';

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
  if (!isUtf8(body)) throw InputError.of('body', '(body)', 'must be UTF-8');
  if (body.length === 0) return undefined;
  try {
    return await parseJsonInSlices(body, MAX_JSON_DEPTH);
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
 * Fastify's content-type parser over {@link parseJsonBody}. JSON is UTF-8 (RFC 8259 §8.1): a body
 * said to be in another charset is one the service does not take (415), rather than bytes to guess at.
 */
export function jsonBodyParser(request: FastifyRequest, body: string | Buffer): Promise<unknown> {
  const charset = charsetOf(request.headers['content-type']);
  if (charset !== undefined && charset !== 'utf-8' && charset !== 'utf8') {
    return Promise.reject(
      new UnsupportedMediaTypeError(
        `This operation takes JSON in UTF-8, not in ${charset}: send Content-Type: application/json.`,
      ),
    );
  }
  return parseJsonBody(body as Buffer);
}
