import { createAccountIfAbsent, lockAccount } from '../accounts/accounts.js';
import type { Broadcast } from '../broadcast.js';
import type { ApiKeyRow, Db } from '../db/tables.js';
import { ForbiddenError, InputError, LimitError, NotFoundError } from '../errors.js';
import { type PageRequest, readPage } from '../paging.js';
import type {
  ApiKey,
  ApiKeyPage,
  CreateApiKeyBody,
  CreatedApiKey,
  Environment,
  Scope,
} from '../schemas/identity.js';
import * as repo from './api-key-repository.js';
import { generateApiKey } from './key-format.js';
import type { SecretHasher } from './secret-digest.js';
import type { UsageRecorder } from './usage-recorder.js';

/** The user behind an access token, as key management sees them. */
export interface KeyManager {
  readonly subject: string;
  readonly accounts: readonly string[];
}

export type RevokeOutcome = 'revoked' | 'already-revoked' | 'not-found';

export interface ApiKeyServiceOptions {
  readonly environment: Environment;
  /** D20: keys an account may hold that are neither revoked nor expired. */
  readonly maxKeysPerAccount: number;
  readonly hasher: SecretHasher;
  readonly revocations: Broadcast;
  /** Uses not yet written, so that a list shows them before the next flush. */
  readonly usage?: UsageRecorder;
  readonly now?: () => number;
}

/** The one mapper from a stored key to its API shape: no secret, no digest, no creator. */
export function toApiKey(row: ApiKeyRow, pendingLastUsed?: string): ApiKey {
  const lastUsedAt =
    pendingLastUsed !== undefined && (row.last_used_at === null || row.last_used_at < pendingLastUsed)
      ? pendingLastUsed
      : row.last_used_at;
  return {
    id: row.id,
    name: row.name,
    accountId: row.account_id,
    scopes: JSON.parse(row.scopes) as Scope[],
    environment: row.environment as Environment,
    createdAt: row.created_at,
    ...(row.expires_at === null ? {} : { expiresAt: row.expires_at }),
    ...(lastUsedAt === null ? {} : { lastUsedAt }),
    ...(row.revoked_at === null ? {} : { revokedAt: row.revoked_at }),
  };
}

/**
 * Creating, listing and revoking API keys (D8). Methods named `…For` act for a user and apply the
 * account rule; the others are for operators (`playbook keys`).
 */
export class ApiKeyService {
  private readonly now: () => number;

  constructor(
    private readonly db: Db,
    private readonly options: ApiKeyServiceOptions,
  ) {
    this.now = options.now ?? Date.now;
  }

  /** Mints a key of this deployment's environment; the key string is in the answer and nowhere else. */
  async createFor(user: KeyManager, input: CreateApiKeyBody): Promise<CreatedApiKey> {
    if (!user.accounts.includes(input.accountId)) {
      throw new ForbiddenError('the access token does not let this user act for that account');
    }
    const now = this.now();
    let expiresAt: string | undefined;
    if (input.expiresAt !== undefined) {
      const at = Date.parse(input.expiresAt);
      if (Number.isNaN(at)) throw InputError.of('body', 'expiresAt', 'must be an RFC 3339 date-time');
      if (at <= now) throw InputError.of('body', 'expiresAt', 'must be in the future');
      expiresAt = new Date(at).toISOString();
    }
    const { key, keyId, secret, environment } = generateApiKey(this.options.environment);
    const createdAt = new Date(now).toISOString();
    const row: ApiKeyRow = {
      id: keyId,
      account_id: input.accountId,
      name: input.name,
      scopes: JSON.stringify(input.scopes),
      environment,
      secret_hash: this.options.hasher.digest(secret).toString('hex'),
      created_by: user.subject,
      created_at: createdAt,
      expires_at: expiresAt ?? null,
      revoked_at: null,
      last_used_at: null,
    };
    await this.db.transaction().execute(async (trx) => {
      await createAccountIfAbsent(trx, input.accountId, createdAt);
      // Serialises key creation per account, so that two at once cannot both pass the count.
      await lockAccount(trx, input.accountId);
      const active = await repo.countActiveApiKeys(trx, input.accountId, createdAt);
      if (active >= this.options.maxKeysPerAccount) {
        throw new LimitError(
          `account ${input.accountId} already holds ${active} active API keys, the most this service allows; revoke one first`,
        );
      }
      await repo.insertApiKey(trx, row);
    });
    return { ...toApiKey(row), key };
  }

  /** A page of an account's keys, oldest first, for a user who may act for it (else 403). */
  async listFor(user: KeyManager, accountId: string, request: PageRequest = {}): Promise<ApiKeyPage> {
    if (!user.accounts.includes(accountId)) {
      throw new ForbiddenError('the access token does not let this user act for that account');
    }
    const { rows, meta } = await readPage(
      request,
      () => repo.countApiKeys(this.db, accountId),
      (window) => repo.listApiKeys(this.db, accountId, window),
    );
    return { data: rows.map((row) => this.toApiKey(row)), meta };
  }

  /** Every key of an account, oldest first (`playbook keys list`). */
  async list(accountId: string): Promise<ApiKey[]> {
    const rows = await repo.listApiKeys(this.db, accountId);
    return rows.map((row) => this.toApiKey(row));
  }

  private toApiKey(row: ApiKeyRow): ApiKey {
    return toApiKey(row, this.options.usage?.pending(row.id));
  }

  /**
   * Revokes a key of an account the user may act for. Idempotent; a key of another account is
   * answered exactly like one that does not exist (404), so that key ids reveal nothing.
   */
  async revokeFor(user: KeyManager, keyId: string): Promise<void> {
    const row = await repo.findApiKey(this.db, keyId);
    if (!row || !user.accounts.includes(row.account_id)) throw new NotFoundError('no such API key');
    await this.revoke(keyId);
  }

  async revoke(keyId: string): Promise<RevokeOutcome> {
    const revoked = await repo.revokeApiKey(this.db, keyId, new Date(this.now()).toISOString());
    if (!revoked && !(await repo.findApiKey(this.db, keyId))) return 'not-found';
    // Announced even when already revoked: a cheap repeat that heals a lost announcement.
    await this.options.revocations.publish(keyId);
    return revoked ? 'revoked' : 'already-revoked';
  }
}
