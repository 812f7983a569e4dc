import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { holdsCredential } from '../foundation/redact-url.js';
import { REQUEST_ID_PATTERN } from '../schemas/common.js';

const SANE_REQUEST_ID = new RegExp(REQUEST_ID_PATTERN);

/**
 * The id of a request (D2): the caller's `x-request-id` echoed when it is sane, otherwise one made
 * here. A credential sent as one would be echoed in the answer and written in every log line of the
 * request (D21).
 */
export function requestIdOf(request: IncomingMessage): string {
  const sent = request.headers['x-request-id'];
  return typeof sent === 'string' && SANE_REQUEST_ID.test(sent) && !holdsCredential(sent)
    ? sent
    : randomUUID();
}
