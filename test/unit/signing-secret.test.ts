import { randomBytes } from 'node:crypto';
import { Webhook } from 'standardwebhooks';
import { describe, expect, it } from 'vitest';
import { DeploymentKeys } from '../../src/foundation/deployment-key.js';
import {
  generateSigningSecret,
  openSecret,
  SealedSecretError,
  sealSecret,
  signDelivery,
  signingKeyOf,
} from '../../src/webhooks/signing-secret.js';

/**
 * D28: a webhook signing secret is sealed at rest (AES-256-GCM under a key derived from the deployment
 * key), opens under an older key after the deployment key is replaced, and nowhere else; deliveries
 * are signed as Standard Webhooks says.
 */
describe('webhook signing secrets (D28)', () => {
  const oldKey = randomBytes(32);
  const newKey = randomBytes(32);

  it('are Standard Webhooks secrets: whsec_ and base64 of 32 random bytes, each new', () => {
    const secret = generateSigningSecret();
    expect(secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    expect(signingKeyOf(secret)).toHaveLength(32);
    expect(generateSigningSecret()).not.toBe(secret);
  });

  it('seal and open under the current key; the sealed text holds neither the secret nor its bytes', () => {
    const keys = new DeploymentKeys([newKey]);
    const secret = generateSigningSecret();
    const sealed = sealSecret(keys, 'endpoint-1', secret);
    expect(sealed.keyId).toBe(keys.current.id);
    expect(sealed.sealed).not.toContain(secret.slice(6));
    expect(sealed.sealed).not.toContain(signingKeyOf(secret).toString('base64url'));
    expect(openSecret(keys, 'endpoint-1', sealed)).toBe(secret);
    // Sealed twice, two different texts (a fresh nonce each time).
    expect(sealSecret(keys, 'endpoint-1', secret).sealed).not.toBe(sealed.sealed);
  });

  it('open under an older key while the deployment still holds it, and not once it is dropped', () => {
    const secret = generateSigningSecret();
    const sealed = sealSecret(new DeploymentKeys([oldKey]), 'endpoint-1', secret);
    expect(openSecret(new DeploymentKeys([newKey, oldKey]), 'endpoint-1', sealed)).toBe(secret);
    expect(() => openSecret(new DeploymentKeys([newKey]), 'endpoint-1', sealed)).toThrow(SealedSecretError);
  });

  it('do not open for another endpoint, nor once altered', () => {
    const keys = new DeploymentKeys([newKey]);
    const sealed = sealSecret(keys, 'endpoint-1', generateSigningSecret());
    expect(() => openSecret(keys, 'endpoint-2', sealed)).toThrow(SealedSecretError);
    // One bit flipped in the nonce, in the ciphertext and in the tag; then the text cut short. Bytes are
    // altered rather than the text's characters, so that every alteration is certain to change them.
    const prefix = sealed.sealed.slice(0, sealed.sealed.indexOf('.') + 1);
    const bytes = Buffer.from(sealed.sealed.slice(prefix.length), 'base64url');
    const sealedAs = (altered: Buffer) => ({
      ...sealed,
      sealed: `${prefix}${altered.toString('base64url')}`,
    });
    /** Why `altered` is refused: a message of SealedSecretError. */
    const refusal = (altered: Buffer) => {
      try {
        openSecret(keys, 'endpoint-1', sealedAs(altered));
      } catch (error) {
        expect(error).toBeInstanceOf(SealedSecretError);
        return (error as Error).message;
      }
      return 'opened';
    };
    expect(openSecret(keys, 'endpoint-1', sealedAs(bytes))).toMatch(/^whsec_/);
    for (const at of [0, 12, bytes.length - 1]) {
      const flipped = Buffer.from(bytes);
      flipped[at] = (flipped[at] as number) ^ 0x01;
      expect(refusal(flipped), `bit flipped at ${at}`).toMatch(/does not open/);
    }
    // Longer than a nonce and a tag, however short: deciphered, and refused by the tag.
    for (const length of [bytes.length - 12, 29]) {
      expect(refusal(bytes.subarray(0, length)), `${length} bytes`).toMatch(/does not open/);
    }
    // No longer than a nonce and a tag: refused before any deciphering.
    for (const length of [0, 8, 20, 28]) {
      expect(refusal(bytes.subarray(0, length)), `${length} bytes`).toMatch(/cut short/);
    }
  });

  it('sign as the standardwebhooks package verifies, and as its own signer signs', () => {
    const secret = generateSigningSecret();
    const id = 'msg_2LJ8xmFeYBSvuHC4ibYQbENgtg4';
    const timestamp = Math.floor(Date.now() / 1000);
    const body = JSON.stringify({ type: 'catalog.created', timestamp: new Date().toISOString(), data: {} });
    const signature = signDelivery(signingKeyOf(secret), id, timestamp, body);
    const webhook = new Webhook(secret);
    expect(signature).toBe(webhook.sign(id, new Date(timestamp * 1000), body));
    expect(() =>
      webhook.verify(body, {
        'webhook-id': id,
        'webhook-timestamp': String(timestamp),
        'webhook-signature': signature,
      }),
    ).not.toThrow();
  });
});
