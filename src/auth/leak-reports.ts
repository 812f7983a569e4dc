import { createPublicKey, type KeyObject, verify } from 'node:crypto';
import { AuthenticationError, UnavailableError } from '../foundation/errors.js';

/**
 * Signatures of leak reports in the format of GitHub's secret scanning partner program (D22): the
 * raw body is signed with ECDSA P-256 over SHA-256, the signature sent base64-encoded (DER) in
 * `Github-Public-Key-Signature`, and the key named by `Github-Public-Key-Identifier` among those the
 * program lists as `{ public_keys: [{ key_identifier, key, is_current }] }` at a well-known URL.
 */

export const KEY_IDENTIFIER_HEADER = 'github-public-key-identifier';
export const SIGNATURE_HEADER = 'github-public-key-signature';

export interface LeakReportSignaturesOptions {
  /** `PLAYBOOK_LEAK_REPORT_KEYS_URL`. */
  readonly keysUrl: string;
  /** An unknown key identifier fetches the list again, at most this often (a rotation shows up). */
  readonly refetchAfterMs?: number;
  readonly timeoutMs?: number;
  readonly now?: () => number;
}

interface ListedKey {
  readonly key_identifier: string;
  readonly key: string;
}

/** Verifies leak report signatures against the listed public keys, cached by key identifier. */
export class LeakReportSignatures {
  private keys = new Map<string, KeyObject>();
  private fetchedAt = Number.NEGATIVE_INFINITY;
  /** Why the last fetch failed, answered again until the interval allows another try. */
  private failure: UnavailableError | null = null;
  private fetching: Promise<void> | null = null;
  private readonly now: () => number;

  constructor(private readonly options: LeakReportSignaturesOptions) {
    this.now = options.now ?? Date.now;
  }

  /**
   * Throws `AuthenticationError` unless `signature` is a valid signature of `body` by the listed key
   * `identifier`; `UnavailableError` when the key list cannot be fetched (the reporter retries).
   */
  async verify(body: Buffer, identifier: string | undefined, signature: string | undefined): Promise<void> {
    if (!identifier || !signature) {
      throw new AuthenticationError(
        `a leak report must be signed: ${KEY_IDENTIFIER_HEADER} and ${SIGNATURE_HEADER} are required`,
        'missing',
      );
    }
    const key = await this.keyFor(identifier);
    if (!key)
      throw new AuthenticationError('the leak report is signed with a key that is not listed', 'invalid');
    let valid = false;
    try {
      valid = verify('sha256', body, { key, dsaEncoding: 'der' }, Buffer.from(signature, 'base64'));
    } catch {
      // A signature that is not DER at all is as invalid as a wrong one.
    }
    if (!valid) throw new AuthenticationError('the leak report signature does not verify', 'invalid');
  }

  private async keyFor(identifier: string): Promise<KeyObject | undefined> {
    const known = this.keys.get(identifier);
    if (known) return known;
    // An unknown identifier costs a fetch at most once per interval, however many reports carry it.
    if (this.now() - this.fetchedAt >= (this.options.refetchAfterMs ?? 60_000)) {
      this.fetching ??= this.fetchKeys().finally(() => {
        this.fetching = null;
      });
      await this.fetching;
    }
    if (this.failure) throw this.failure;
    return this.keys.get(identifier);
  }

  private async fetchKeys(): Promise<void> {
    this.fetchedAt = this.now();
    try {
      this.keys = await this.listedKeys();
      this.failure = null;
    } catch (error) {
      this.failure = error as UnavailableError;
    }
  }

  private async listedKeys(): Promise<Map<string, KeyObject>> {
    let listed: unknown;
    try {
      const answer = await fetch(this.options.keysUrl, {
        headers: { accept: 'application/json' },
        signal: AbortSignal.timeout(this.options.timeoutMs ?? 5000),
      });
      if (!answer.ok) throw new Error(`answered ${answer.status}`);
      listed = await answer.json();
    } catch (error) {
      throw new UnavailableError(
        `the leak report key list could not be fetched: ${(error as Error).message}`,
      );
    }
    const entries = (listed as { public_keys?: unknown } | null)?.public_keys;
    if (!Array.isArray(entries)) {
      throw new UnavailableError('the leak report key list has no public_keys array');
    }
    const keys = new Map<string, KeyObject>();
    for (const entry of entries as Partial<ListedKey>[]) {
      if (typeof entry?.key_identifier !== 'string' || typeof entry.key !== 'string') continue;
      try {
        const key = createPublicKey(entry.key);
        if (key.asymmetricKeyDetails?.namedCurve === 'prime256v1') keys.set(entry.key_identifier, key);
      } catch {
        // A key that does not parse verifies nothing; the others still do.
      }
    }
    return keys;
  }
}
