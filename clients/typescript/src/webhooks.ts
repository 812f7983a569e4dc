import type { components } from './openapi.js';

/** What every delivery POSTs: `{ type, timestamp, data }`. */
export type WebhookEvent = components['schemas']['WebhookEvent'];

/** A delivery that is not from the service: a header missing, a timestamp out of tolerance, no signature that holds. */
export class WebhookVerificationError extends Error {
  override name = 'WebhookVerificationError';
}

/** Request headers as Node (`IncomingHttpHeaders`), `fetch` (`Headers`) or a plain object gives them. */
export type WebhookHeaders = Headers | Readonly<Record<string, string | readonly string[] | undefined>>;

export interface VerifyWebhookOptions {
  /** How far the `webhook-timestamp` may be from now, in seconds: 300 (five minutes) by default. */
  readonly toleranceSeconds?: number;
  /** The clock, in milliseconds since the epoch. */
  readonly now?: () => number;
}

const DEFAULT_TOLERANCE_S = 300;

function header(headers: WebhookHeaders, name: string): string | undefined {
  if (typeof (headers as Headers).get === 'function') return (headers as Headers).get(name) ?? undefined;
  const record = headers as Readonly<Record<string, string | readonly string[] | undefined>>;
  const key = Object.keys(record).find((candidate) => candidate.toLowerCase() === name);
  const value = key === undefined ? undefined : record[key];
  return Array.isArray(value) ? value.join(' ') : (value as string | undefined);
}

function base64Bytes(text: string): Uint8Array<ArrayBuffer> {
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

/**
 * Checks that a webhook delivery comes from the service, as the Standard Webhooks specification
 * says, and returns its event. `body` must be the raw body as received (not parsed and serialised
 * again). The `webhook-signature` header may hold several signatures (while a secret is replaced); one
 * that holds is enough. Signatures are compared in constant time (Web Crypto's HMAC verify), and a
 * `webhook-timestamp` more than five minutes away is refused, so that a captured delivery cannot be
 * replayed later. Drop an event whose `webhook-id` you have already handled: a delivery may come more
 * than once.
 *
 * @example
 * // Node's http server, or any framework that gives the raw body:
 * const event = await verifyWebhook(process.env.PLAYBOOK_WEBHOOK_SECRET, request.headers, rawBody);
 * if (event.type === 'resource.version_published') refresh(event.data.target.id);
 */
export async function verifyWebhook(
  secret: string,
  headers: WebhookHeaders,
  body: string | Uint8Array,
  options: VerifyWebhookOptions = {},
): Promise<WebhookEvent> {
  const id = header(headers, 'webhook-id');
  const timestamp = header(headers, 'webhook-timestamp');
  const signatures = header(headers, 'webhook-signature');
  if (!id || !timestamp || !signatures) {
    throw new WebhookVerificationError('missing webhook-id, webhook-timestamp or webhook-signature header');
  }
  if (!/^\d{1,12}$/.test(timestamp))
    throw new WebhookVerificationError('webhook-timestamp is not a number of seconds');
  const now = Math.floor((options.now ?? Date.now)() / 1000);
  const tolerance = options.toleranceSeconds ?? DEFAULT_TOLERANCE_S;
  if (Math.abs(now - Number(timestamp)) > tolerance) {
    throw new WebhookVerificationError(
      'webhook-timestamp is too far from now: an old delivery replayed, or a clock off',
    );
  }
  const text = typeof body === 'string' ? body : new TextDecoder().decode(body);
  let keyBytes: Uint8Array<ArrayBuffer>;
  try {
    keyBytes = base64Bytes(secret.startsWith('whsec_') ? secret.slice('whsec_'.length) : secret);
  } catch {
    throw new WebhookVerificationError('the secret is not a whsec_ signing secret');
  }
  const key = await crypto.subtle.importKey('raw', keyBytes, { name: 'HMAC', hash: 'SHA-256' }, false, [
    'verify',
  ]);
  const signed = new TextEncoder().encode(`${id}.${timestamp}.${text}`);
  for (const entry of signatures.split(' ')) {
    const [version, signature] = entry.split(',', 2);
    if (version !== 'v1' || !signature) continue;
    let bytes: Uint8Array<ArrayBuffer>;
    try {
      bytes = base64Bytes(signature);
    } catch {
      continue;
    }
    if (await crypto.subtle.verify('HMAC', key, bytes, signed)) {
      try {
        return JSON.parse(text) as WebhookEvent;
      } catch {
        throw new WebhookVerificationError('the body is not JSON');
      }
    }
  }
  throw new WebhookVerificationError('no signature of webhook-signature matches the body and the secret');
}
