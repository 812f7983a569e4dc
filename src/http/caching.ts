import { createHash } from 'node:crypto';
import type { FastifyReply, FastifyRequest } from 'fastify';

/** Answers of immutable Resource Versions (D11). */
export const IMMUTABLE = 'private, max-age=31536000, immutable';
const REVALIDATE = 'private, no-cache';

/** The strong validator of an answer whose bytes the base64url SHA-256 `digest` stands for. */
export function strongEtag(digest: string): string {
  return `"${digest.slice(0, 32)}"`;
}

/** Whether an `If-None-Match` header matches `etag` (weak comparison, as RFC 9110 asks for GET). */
export function etagMatches(ifNoneMatch: string | undefined, etag: string): boolean {
  if (!ifNoneMatch) return false;
  const opaque = (tag: string) => tag.trim().replace(/^W\//, '');
  const wanted = opaque(etag);
  return ifNoneMatch.split(',').some((candidate) => candidate.trim() === '*' || opaque(candidate) === wanted);
}

/**
 * A 304 says only which validator matched: no body, no Content-Type, and no Content-Length, which
 * would have to be the full answer's (RFC 9110 §8.6, §15.4.5). A null payload makes Fastify send
 * none.
 */
function notModified(reply: FastifyReply): null {
  reply.removeHeader('content-type');
  reply.removeHeader('content-length');
  return null;
}

/**
 * onSend: every successful read carries an ETag (from its body unless the route set one) and a
 * Cache-Control; a matching `If-None-Match` turns it into a 304 with no body. Routes that assemble
 * their answer from cached parts set the ETag from those parts' digests, so that a large answer is
 * not hashed again on every request.
 */
export async function conditionalGet(request: FastifyRequest, reply: FastifyReply, payload: unknown) {
  if (request.method !== 'GET' && request.method !== 'HEAD') return payload;
  // A route that answered 304 itself (from metadata alone) still sends it bare.
  if (reply.statusCode === 304) return notModified(reply);
  if (reply.statusCode !== 200) return payload;
  // Answers that must never be reused (health and readiness) are never revalidated either: a probe
  // that sent If-None-Match would otherwise read a 304 instead of the state it asked for.
  if (reply.getHeader('cache-control') === 'no-store') return payload;
  if (!reply.hasHeader('cache-control')) reply.header('cache-control', REVALIDATE);
  let etag = reply.getHeader('etag') as string | undefined;
  if (etag === undefined) {
    if (typeof payload !== 'string' && !Buffer.isBuffer(payload)) return payload;
    etag = strongEtag(createHash('sha256').update(payload).digest('base64url'));
    reply.header('etag', etag);
  }
  if (etagMatches(request.headers['if-none-match'], etag)) {
    reply.code(304);
    return notModified(reply);
  }
  return payload;
}
