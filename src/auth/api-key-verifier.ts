import type { LRUCache } from 'lru-cache';
import type { FollowedChanges } from '../changes/change-follower.js';
import { ALWAYS_TRUSTED, type Trust } from '../changes/memory-trust.js';
import type { Broadcast } from '../foundation/broadcast.js';
import { AuthenticationError, UnavailableError } from '../foundation/errors.js';
import { growingCache } from '../foundation/growing-cache.js';
import type { Environment } from '../schemas/api-key-format.js';
import { apiKeyParts, parseApiKey } from '../schemas/api-key-format.js';
import type { Scope } from '../schemas/identity.js';
import type { ApiKeyWithPlan } from './api-key-repository.js';
import { compileRestrictions, type Restrictions, readRestrictions } from './key-restrictions.js';
import { digestsEqual, type SecretHasher } from './secret-digest.js';
import type { UsageRecorder } from './usage-recorder.js';

/**
 * What the key bus carries (`revocations`): a key id alone is a revocation, final; `changed:<keyId>` is
 * a key whose row changed otherwise (a roll moved its expiry, a change set its restrictions), to be
 * read again.
 */
export const KEY_CHANGED_PREFIX = 'changed:';

/** Where the verifier reads a key from on a cache miss or a revalidation. */
export interface ApiKeyLookup {
  find(keyId: string): Promise<ApiKeyWithPlan | undefined>;
}

/** What a verified key grants. */
export interface VerifiedApiKey {
  readonly keyId: string;
  readonly accountId: string;
  readonly plan: string;
  readonly scopes: ReadonlySet<Scope>;
  /** D32: compiled once per read of the key, shared by every request that presents it. */
  readonly restrictions: Restrictions | null;
}

interface CachedKey {
  readonly keyId: string;
  readonly accountId: string;
  readonly plan: string;
  readonly scopes: ReadonlySet<Scope>;
  readonly restrictions: Restrictions | null;
  readonly environment: string;
  readonly digest: Buffer;
  readonly expiresAtMs: number | null;
  readonly revoked: boolean;
  /** When the storage read this entry came from started: the entry is as fresh as that moment. */
  readonly validatedAt: number;
}

export interface ApiKeyVerifierOptions {
  readonly lookup: ApiKeyLookup;
  readonly hasher: SecretHasher;
  readonly revocations: Broadcast;
  readonly usage: UsageRecorder;
  readonly environment: Environment;
  readonly now?: () => number;
  /**
   * How old a cached key may be before it is read from storage again. This bounds how long a key
   * revoked by another process (the `playbook keys revoke` command, another instance without a shared
   * bus) stays usable; one second is D8's promise.
   */
  readonly revalidateAfterMs?: number;
  readonly maxCachedKeys?: number;
  /**
   * D31: during a database outage a key verified before it goes on being accepted from memory (its
   * expiry still applies, a revocation announced on the bus still evicts it at once): nothing about
   * a key can change while the database does not answer.
   */
  readonly trust?: Trust;
}

/**
 * Verifies presented API keys (D8).
 *
 * - `verify` refuses a malformed key or a bad checksum before any hashing or storage access. The
 *   memory path hashes any well-formed key and never reads storage; it can admit only a key whose
 *   digest is stored, and only keys this service minted (`generateApiKey`) have their digests stored.
 * - The secret is always hashed, and the digest compared in constant time, against the stored digest
 *   or, for an unknown key id, against a dummy of the same length; either refusal then reads storage
 *   once. An unknown id costs the work of a wrong secret, so that timing tells no key id's existence.
 * - Verified keys are cached with their account's plan, so a busy key costs at most one storage read
 *   per `revalidateAfterMs`. A revocation announced on the bus evicts at once; expiry is checked on
 *   every use against the cached `expiresAt`.
 */
export class ApiKeyVerifier {
  private readonly cache: LRUCache<string, CachedKey>;
  /** Storage reads under way, each with the revocation epoch at its start. */
  private readonly loading = new Map<
    string,
    { readonly entry: Promise<CachedKey | undefined>; readonly epoch: number }
  >();
  private readonly now: () => number;
  private readonly revalidateAfterMs: number;
  /** Bumped by every revocation, so that a read that raced one is used once but not cached. */
  private revocationEpoch = 0;
  private readonly unsubscribe: () => void;
  private readonly trust: Trust;

  constructor(private readonly options: ApiKeyVerifierOptions) {
    this.now = options.now ?? Date.now;
    this.trust = options.trust ?? ALWAYS_TRUSTED;
    this.revalidateAfterMs = options.revalidateAfterMs ?? 1000;
    this.cache = growingCache(options.maxCachedKeys ?? 10_000);
    this.unsubscribe = options.revocations.subscribe((message) => {
      if (message.startsWith(KEY_CHANGED_PREFIX)) this.changed(message.slice(KEY_CHANGED_PREFIX.length));
      else this.revoked(message);
    });
  }

  /**
   * What the key grants when memory alone can tell: its entry is cached and fresh, the secret's
   * digest matches, and it is live. Anything else is `undefined`, for `verify` to decide with
   * storage and to say why it refuses. The digest is made before the cache is looked at, so that a
   * key that is cached and one that is not cost the same here too.
   */
  verifyFromMemory(presented: string): VerifiedApiKey | undefined {
    // The checksum is left to `verify`: a secret whose digest matches a stored one is the issued
    // key's, checksum and all.
    const parsed = apiKeyParts(presented);
    if (!parsed || parsed.environment !== this.options.environment) return undefined;
    const digest = this.options.hasher.digest(parsed.secret);
    const now = this.now();
    const cached = this.cache.get(parsed.keyId);
    if (!cached || !this.servable(cached, now)) return undefined;
    if (!digestsEqual(digest, cached.digest) || this.refusalOf(cached, now)) return undefined;
    return this.grant(cached, now);
  }

  /** Returns what the key grants, or throws `AuthenticationError` (401) saying why, never echoing it. */
  async verify(presented: string): Promise<VerifiedApiKey> {
    const parsed = parseApiKey(presented);
    if (!parsed) throw new AuthenticationError('the API key is malformed', 'malformed');
    const { environment } = this.options;
    if (parsed.environment !== environment) {
      throw new AuthenticationError(`this deployment accepts only ${environment} API keys`, 'environment');
    }
    const digest = this.options.hasher.digest(parsed.secret);
    const now = this.now();
    const { entry, fresh } = await this.entryFor(parsed.keyId, now);
    // Compared even when the id is unknown, so that both refusals cost the same comparison.
    const matches = digestsEqual(digest, entry?.digest ?? Buffer.alloc(digest.length));
    if (!entry || !matches) {
      // And the same storage read: an unknown id is always read from storage, so a wrong secret for a
      // cached key is too. Otherwise the time of a refusal would tell which key ids exist.
      if (!fresh.loaded) await this.options.lookup.find(parsed.keyId);
      throw new AuthenticationError('the API key is not valid', 'invalid', entry?.keyId);
    }
    this.adopt(entry, fresh);
    const refusal = this.refusalOf(entry, now);
    if (refusal) throw refusal;
    return this.grant(entry, now);
  }

  /**
   * Throws the refusal a new request with this key would get now, if it is refused (D27: before a
   * request held for a while answers). Memory answers whenever it may be served, however long ago the
   * key was read: a revocation reaches the held entry through the bus or the change log and marks it,
   * a roll or a plan change drops it, and the expiry is checked against the clock. Storage is read
   * only for a key no longer held, or while memory may not be served, and then once for every request
   * that asks meanwhile: a thousand requests of one key woken by one change make one read at most.
   */
  async recheck(keyId: string): Promise<void> {
    const now = this.now();
    const held = this.cache.get(keyId);
    let entry = held !== undefined && this.trust.trusted ? held : undefined;
    if (!entry) {
      const read = await this.entryFor(keyId, now);
      if (!read.entry) throw new AuthenticationError('the API key is not valid', 'invalid');
      this.adopt(read.entry, read.fresh);
      entry = read.entry;
    }
    const refusal = this.refusalOf(entry, now);
    if (refusal) throw refusal;
  }

  /** Keeps an entry read from storage, unless a revocation was announced while it was read. */
  private adopt(entry: CachedKey, fresh: { loaded: boolean; epoch: number }): void {
    if (!fresh.loaded) return;
    if (fresh.epoch === this.revocationEpoch) this.cache.set(entry.keyId, entry);
    // A read begun before a revocation was announced says what was true then: the mark it left wins.
    else if (this.cache.get(entry.keyId)?.revoked) {
      throw new AuthenticationError('the API key has been revoked', 'revoked', entry.keyId);
    }
  }

  /** Why a key whose secret matched is refused all the same, if it is. */
  private refusalOf(entry: CachedKey, now: number): AuthenticationError | undefined {
    const { environment } = this.options;
    const { keyId } = entry;
    if (entry.revoked) return new AuthenticationError('the API key has been revoked', 'revoked', keyId);
    if (entry.expiresAtMs !== null && entry.expiresAtMs <= now) {
      return new AuthenticationError('the API key has expired', 'expired', keyId);
    }
    if (entry.environment !== environment) {
      return new AuthenticationError(
        `this deployment accepts only ${environment} API keys`,
        'environment',
        keyId,
      );
    }
    return undefined;
  }

  private grant(entry: CachedKey, now: number): VerifiedApiKey {
    this.options.usage.record(entry.keyId, now);
    return {
      keyId: entry.keyId,
      accountId: entry.accountId,
      plan: entry.plan,
      scopes: entry.scopes,
      restrictions: entry.restrictions,
    };
  }

  /**
   * What the change log says changed (D26): a key revoked is refused from memory; a key rolled (its
   * expiry moved) or changed (D32), or a key of an account whose plan changed, is read from storage
   * again at its next use, however the change reached the log (another instance, a command on another
   * process) and whether or not Redis announced it.
   */
  follow(followed: FollowedChanges): void {
    if (followed.startAfresh) {
      this.revocationEpoch++;
      this.cache.clear();
      return;
    }
    for (const change of followed.changes) {
      if (change.type === 'api_key.revoked' || change.type === 'api_key.leak_revoked') {
        this.revoked(change.target.id);
      } else if (change.type === 'api_key.rolled' || change.type === 'api_key.updated') {
        // The rolled key now expires at the end of its overlap; a changed key has a new name, expiry
        // or restrictions (D32): read again.
        this.changed(change.target.id);
      } else if (change.type === 'account.plan_changed') {
        this.revocationEpoch++;
        for (const [keyId, entry] of this.cache.entries()) {
          if (entry.accountId === change.namespace) this.cache.delete(keyId);
        }
      }
    }
  }

  /**
   * Whether a held entry may be used without reading storage: a fresh one while memory is trusted
   * (not once the database is back but the change log not yet read, D31), any one through an outage.
   */
  private servable(entry: CachedKey, now: number): boolean {
    return now - entry.validatedAt < this.revalidateAfterMs ? this.trust.trusted : this.trust.outage;
  }

  /** A key whose row changed (not revoked): forgotten, and read again at its next use. */
  private changed(keyId: string): void {
    this.revocationEpoch++;
    this.cache.delete(keyId);
  }

  /**
   * A revocation, announced on the bus or read in the log: a key held is kept as revoked rather than
   * forgotten, so that it is refused from memory even while the database does not answer (D31).
   */
  private revoked(keyId: string): void {
    this.revocationEpoch++;
    const held = this.cache.get(keyId);
    if (held) this.cache.set(keyId, { ...held, revoked: true });
  }

  close(): void {
    this.unsubscribe();
    this.cache.clear();
  }

  private async entryFor(
    keyId: string,
    now: number,
  ): Promise<{ entry: CachedKey | undefined; fresh: { loaded: boolean; epoch: number } }> {
    const cached = this.cache.get(keyId);
    // Fresh, or served through a database outage (D31): storage is not asked.
    if (cached && this.servable(cached, now)) {
      return { entry: cached, fresh: { loaded: false, epoch: this.revocationEpoch } };
    }
    // One storage read per key at a time, however many requests wait for it. A request that joins a
    // read takes that read's epoch: a revocation announced after the read began must not be
    // overwritten by what it returns.
    let pending = this.loading.get(keyId);
    if (!pending) {
      const started = { entry: this.load(keyId, now), epoch: this.revocationEpoch };
      pending = started;
      this.loading.set(keyId, started);
      void started.entry.then(
        () => this.loading.delete(keyId),
        () => this.loading.delete(keyId),
      );
    }
    const { epoch } = pending;
    let entry: CachedKey | undefined;
    try {
      entry = await pending.entry;
    } catch (error) {
      // The read that found the database out: a key verified before is served through it, while
      // memory may be served (not once the database is back but the change log not yet read), and
      // unless a revocation was announced meanwhile (it marked the entry, and moved the epoch).
      const held = this.cache.get(keyId);
      if (error instanceof UnavailableError && held && this.trust.trusted && epoch === this.revocationEpoch) {
        return { entry: held, fresh: { loaded: false, epoch } };
      }
      throw error;
    }
    if (!entry) this.cache.delete(keyId);
    return { entry, fresh: { loaded: true, epoch } };
  }

  private async load(keyId: string, startedAt: number): Promise<CachedKey | undefined> {
    const row = await this.options.lookup.find(keyId);
    if (!row) return undefined;
    return {
      keyId: row.id,
      accountId: row.account_id,
      plan: row.plan,
      scopes: new Set(JSON.parse(row.scopes) as Scope[]),
      restrictions: compileRestrictions(readRestrictions(row.restrictions)),
      environment: row.environment,
      digest: Buffer.from(row.secret_hash, 'hex'),
      expiresAtMs: row.expires_at === null ? null : Date.parse(row.expires_at),
      revoked: row.revoked_at !== null,
      validatedAt: startedAt,
    };
  }
}
