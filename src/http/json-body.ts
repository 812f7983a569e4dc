import type { FastifyRequest } from 'fastify';
import { InputError } from '../errors.js';

const strictUtf8 = new TextDecoder('utf-8', { fatal: true });

/**
 * Decodes a JSON body strictly (D21): bytes that are not UTF-8 are refused, never turned into
 * replacement characters and stored. Every key is data: JSON.parse never sets a prototype, and
 * nothing merges a body into another object. An empty body is no body.
 */
export function parseJsonBody(body: Buffer): unknown {
  let text: string;
  try {
    text = strictUtf8.decode(body);
  } catch {
    throw InputError.of('body', '(body)', 'must be UTF-8');
  }
  try {
    return text === '' ? undefined : JSON.parse(text);
  } catch (error) {
    throw InputError.of('body', '(body)', `is not valid JSON (${(error as Error).message})`);
  }
}

/** Fastify's content-type parser over {@link parseJsonBody}. */
export function jsonBodyParser(
  _request: FastifyRequest,
  body: string | Buffer,
  done: (error: Error | null, body?: unknown) => void,
): void {
  let parsed: unknown;
  try {
    parsed = parseJsonBody(body as Buffer);
  } catch (error) {
    done(error as Error, undefined);
    return;
  }
  done(null, parsed);
}
