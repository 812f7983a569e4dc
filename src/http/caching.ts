import { createHash } from 'node:crypto';
import type { FastifyReply, FastifyRequest } from 'fastify';

/** Answers of immutable Resource Versions (D11). */
export const IMMUTABLE = 'private, max-age=31536000, immutable';
const REVALIDATE = 'private, no-cache';

/** Whether an `If-None-Match` header matches `etag` (weak comparison, as RFC 9110 asks for GET). */
export function etagMatches(ifNoneMatch: string | undefined, etag: string): boolean {
  if (!ifNoneMatch) return false;
  const opaque = (tag: string) => tag.trim().replace(/^W\//, '');
  const wanted = opaque(etag);
  return ifNoneMatch.split(',').some((candidate) => candidate.trim() === '*' || opaque(candidate) === wanted);
}

/**
 * onSend: every successful read carries an ETag (from its body unless the route set one) and a
 * Cache-Control; a matching `If-None-Match` turns it into a 304 with no body.
 */
export async function conditionalGet(request: FastifyRequest, reply: FastifyReply, payload: unknown) {
  if ((request.method !== 'GET' && request.method !== 'HEAD') || reply.statusCode !== 200) return payload;
  if (!reply.hasHeader('cache-control')) reply.header('cache-control', REVALIDATE);
  let etag = reply.getHeader('etag') as string | undefined;
  if (etag === undefined) {
    if (typeof payload !== 'string' && !Buffer.isBuffer(payload)) return payload;
    etag = `"${createHash('sha256').update(payload).digest('base64url').slice(0, 32)}"`;
    reply.header('etag', etag);
  }
  if (etagMatches(request.headers['if-none-match'], etag)) {
    reply.code(304);
    reply.removeHeader('content-type');
    reply.removeHeader('content-length');
    return '';
  }
  return payload;
}
