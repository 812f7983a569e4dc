import { createCipheriv, createDecipheriv, createHmac, randomBytes } from 'node:crypto';
import type { DeploymentKeys } from '../foundation/deployment-key.js';

/**
 * An endpoint's signing secret (D28), in Standard Webhooks' form: `whsec_` and the base64 of random
 * bytes. The service signs every delivery with it, so it is kept, but sealed: AES-256-GCM under a key
 * derived from the deployment key (never stored beside it), the endpoint's id bound in as associated
 * data so that a sealed secret moved to another row does not open. What is stored names the
 * deployment key it was sealed under, so that a key can be replaced while older seals still open.
 */

const SECRET_PREFIX = 'whsec_';
const SECRET_BYTES = 32;
const IV_BYTES = 12;
const TAG_BYTES = 16;
/** The version of the sealed form, its first characters. */
const SEALED_PREFIX = 'v1.';

/** A new signing secret: `whsec_` and 32 random bytes in base64. */
export function generateSigningSecret(): string {
  return `${SECRET_PREFIX}${randomBytes(SECRET_BYTES).toString('base64')}`;
}

/** The key bytes of a secret, as Standard Webhooks reads them: base64 after the prefix. */
export function signingKeyOf(secret: string): Buffer {
  return Buffer.from(
    secret.startsWith(SECRET_PREFIX) ? secret.slice(SECRET_PREFIX.length) : secret,
    'base64',
  );
}

/** A sealed secret, and the id of the deployment key that sealed it. */
export interface SealedSecret {
  readonly sealed: string;
  readonly keyId: string;
}

/** Seals `secret` for endpoint `endpointId` under the deployment's current key. */
export function sealSecret(keys: DeploymentKeys, endpointId: string, secret: string): SealedSecret {
  const key = keys.current;
  const iv = randomBytes(IV_BYTES);
  const cipher = createCipheriv('aes-256-gcm', key.derive('webhook-secret'), iv);
  cipher.setAAD(Buffer.from(endpointId));
  const body = Buffer.concat([cipher.update(secret, 'utf8'), cipher.final()]);
  return {
    sealed: `${SEALED_PREFIX}${Buffer.concat([iv, body, cipher.getAuthTag()]).toString('base64url')}`,
    keyId: key.id,
  };
}

/** A sealed secret that cannot be opened: its key is gone from the deployment, or it was altered. */
export class SealedSecretError extends Error {
  override name = 'SealedSecretError';
}

/** Opens what `sealSecret` sealed for `endpointId`. */
export function openSecret(keys: DeploymentKeys, endpointId: string, stored: SealedSecret): string {
  const key = keys.find(stored.keyId);
  if (!key) {
    throw new SealedSecretError(
      `the signing secret was sealed under deployment key ${stored.keyId}, which this deployment no longer holds`,
    );
  }
  if (!stored.sealed.startsWith(SEALED_PREFIX)) throw new SealedSecretError('unknown form of sealed secret');
  const bytes = Buffer.from(stored.sealed.slice(SEALED_PREFIX.length), 'base64url');
  if (bytes.length <= IV_BYTES + TAG_BYTES)
    throw new SealedSecretError('the sealed signing secret is cut short');
  const iv = bytes.subarray(0, IV_BYTES);
  const tag = bytes.subarray(bytes.length - TAG_BYTES);
  const body = bytes.subarray(IV_BYTES, bytes.length - TAG_BYTES);
  try {
    const decipher = createDecipheriv('aes-256-gcm', key.derive('webhook-secret'), iv, {
      authTagLength: TAG_BYTES,
    });
    decipher.setAAD(Buffer.from(endpointId));
    decipher.setAuthTag(tag);
    return Buffer.concat([decipher.update(body), decipher.final()]).toString('utf8');
  } catch {
    throw new SealedSecretError('the sealed signing secret does not open: it was altered or moved');
  }
}

/**
 * The `webhook-signature` value of Standard Webhooks: `v1,` and the base64 HMAC-SHA256, under the
 * secret's key bytes, of `<webhook-id>.<webhook-timestamp>.<body>`.
 */
export function signDelivery(key: Buffer, id: string, timestamp: number, body: string): string {
  const mac = createHmac('sha256', key).update(`${id}.${timestamp}.${body}`).digest('base64');
  return `v1,${mac}`;
}
