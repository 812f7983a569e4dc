import { accountCreated, createAccountIfAbsent, lockAccount } from '../accounts/accounts.js';
import type { ChangeActor, NewChange } from '../changes/change-log.js';
import type { UnitOfWork, WriteScope } from '../changes/unit-of-work.js';
import type { ApiKeyRow, Db } from '../db/tables.js';
import type { Broadcast } from '../foundation/broadcast.js';
import {
  ConflictError,
  ForbiddenError,
  InputError,
  KeyAlreadyRolledError,
  LimitError,
  NotFoundError,
} from '../foundation/errors.js';
import { type PageRequest, readPage } from '../foundation/paging.js';
import { type Environment, generateApiKey, parseApiKey } from '../schemas/api-key-format.js';
import type {
  ApiKey,
  ApiKeyPage,
  CreateApiKeyBody,
  CreatedApiKey,
  KeyRestrictions,
  KeyUsage,
  KeyUsageQuery,
  Scope,
  UpdateApiKeyBody,
} from '../schemas/identity.js';
import * as repo from './api-key-repository.js';
import { KEY_CHANGED_PREFIX } from './api-key-verifier.js';
import { accountCrossedThresholds } from './key-expiry-notices.js';
import {
  canonicalRestrictions,
  type DeploymentRate,
  mergeRestrictions,
  readRestrictions,
  storedRestrictions,
} from './key-restrictions.js';
import { usageReport } from './key-usage-report.js';
import { digestsEqual, type SecretHasher } from './secret-digest.js';
import type { UsageRecorder } from './usage-recorder.js';

/** The user behind an access token, as key management sees them. */
export interface KeyManager {
  readonly subject: string;
  readonly accounts: readonly string[];
  /** The request acting, for the audit trail. */
  readonly requestId?: string;
}

export type RevokeOutcome = 'revoked' | 'already-revoked' | 'not-found';

/** A leaked token's verdict, as the secret scanning partner program labels it (D22). */
export type LeakVerdict = 'true_positive' | 'false_positive';

export interface ApiKeyServiceOptions {
  readonly environment: Environment;
  /** D20: keys an account may hold that are neither revoked nor expired. */
  readonly maxKeysPerAccount: number;
  /** D32: the deployment's rate limit (D10), which no key's own may exceed. */
  readonly deploymentRate: DeploymentRate;
  readonly hasher: SecretHasher;
  readonly revocations: Broadcast;
  /** Uses not yet written, so that a list shows them before the next flush. */
  readonly usage?: UsageRecorder;
  /** The way every key event reaches the database, with its change in the log. */
  readonly writes: UnitOfWork;
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
    ...(row.replaced_by === null ? {} : { replacedBy: row.replaced_by }),
    restrictions: readRestrictions(row.restrictions),
  };
}

/**
 * Creating, rolling, listing and revoking API keys (D8, D22). Methods named `…For` act for a user and
 * apply the account rule; the others are for operators (`playbook keys`), and the change log names
 * the operator as their actor.
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
    mayActFor(user, input.accountId);
    return this.createAs(userActing(user), input);
  }

  /** Mints a key as an operator (`playbook keys create`), for any account. */
  async create(input: CreateApiKeyBody): Promise<CreatedApiKey> {
    return this.createAs(OPERATOR, input);
  }

  private async createAs(acting: Acting, input: CreateApiKeyBody): Promise<CreatedApiKey> {
    const now = this.now();
    const expiresAt = input.expiresAt === undefined ? undefined : futureTime(input.expiresAt, now);
    const restrictions = canonicalRestrictions(input.restrictions, this.options.deploymentRate);
    const minted = this.mint(acting, { ...input, expiresAt, restrictions }, now);
    const at = minted.row.created_at;
    await this.options.writes.run('key-create', { ...acting.writer, at }, async (write) => {
      if (await createAccountIfAbsent(write.db, input.accountId, at)) {
        await write.append([accountCreated(input.accountId)]);
      }
      await this.insertWithinCap(write.db, minted.row, 0);
      await accountCrossedThresholds(write.db, minted.row.id, minted.row.expires_at, now);
      await write.append([keyChange(minted.row, 'api_key.created', `API key ${minted.row.id} created`)]);
    });
    return minted.created;
  }

  /**
   * Rolls a key (D22): a new key of the same name, account and scopes, while the old one keeps working
   * for `overlapSeconds` and then expires. A key of an account the user may not act for is 404; a
   * key is rolled once (D29): one that already has a successor is 409 naming it, so that two rolls at
   * once (a retried request, two jobs) leave one successor, not two live keys; a revoked or expired
   * key cannot be rolled (409): it has nothing left to hand over.
   */
  async rollFor(user: KeyManager, keyId: string, overlapSeconds: number): Promise<CreatedApiKey> {
    return this.rollAs(userActing(user), keyId, overlapSeconds);
  }

  /** Rolls a key as an operator (`playbook keys roll`), of any account. */
  async roll(keyId: string, overlapSeconds: number): Promise<CreatedApiKey> {
    return this.rollAs(OPERATOR, keyId, overlapSeconds);
  }

  private async rollAs(acting: Acting, keyId: string, overlapSeconds: number): Promise<CreatedApiKey> {
    const now = this.now();
    const at = new Date(now).toISOString();
    const created = await this.options.writes.run('key-roll', { ...acting.writer, at }, async (write) => {
      const trx = write.db;
      const old = await repo.findApiKey(trx, keyId);
      if (!old || !acting.mayActFor(old.account_id)) throw new NotFoundError('no such API key');
      // The successor is limited as the key it replaces (D32).
      const minted = this.mint(
        acting,
        {
          name: old.name,
          accountId: old.account_id,
          scopes: JSON.parse(old.scopes) as Scope[],
          restrictions: readRestrictions(old.restrictions),
        },
        now,
      );
      // The old key stays counted while it overlaps: one roll may go one past the cap, never two.
      await this.insertWithinCap(trx, minted.row, 1, () => {
        // Read again under the account's lock, where writers take turns: a roll or a revocation that
        // raced this one is seen here.
        return repo.findApiKey(trx, keyId).then((current) => {
          if (current?.replaced_by) throw new KeyAlreadyRolledError(current.replaced_by);
          if (current?.revoked_at !== null) {
            throw new ConflictError('the API key is revoked; create a new key instead', 'key_inactive');
          }
          if (current.expires_at !== null && Date.parse(current.expires_at) <= now) {
            throw new ConflictError('the API key has expired; create a new key instead', 'key_inactive');
          }
        });
      });
      const expiresAt = new Date(now + overlapSeconds * 1000).toISOString();
      if (!(await repo.markRolled(trx, keyId, minted.row.id, expiresAt))) {
        // Not while writers take turns (checked above); were they ever not to, the row still says no.
        const current = await repo.findApiKey(trx, keyId);
        throw new KeyAlreadyRolledError(current!.replaced_by!);
      }
      await write.append([
        keyChange(old, 'api_key.rolled', `API key ${keyId} rolled; replaced by ${minted.row.id}`),
      ]);
      return minted;
    });
    // Every instance re-reads the old key's expiry at once rather than within a second.
    await this.options.revocations.publish(`${KEY_CHANGED_PREFIX}${keyId}`);
    return created.created;
  }

  /** A new key's row and its one-time answer; nothing is stored yet. */
  private mint(
    acting: Acting,
    input: {
      name: string;
      accountId: string;
      scopes: Scope[];
      expiresAt?: string | undefined;
      restrictions: KeyRestrictions | null;
    },
    now: number,
  ): { row: ApiKeyRow; created: CreatedApiKey } {
    const { key, keyId, secret, environment } = generateApiKey(this.options.environment);
    const row: ApiKeyRow = {
      id: keyId,
      account_id: input.accountId,
      name: input.name,
      scopes: JSON.stringify(input.scopes),
      environment,
      secret_hash: this.options.hasher.digest(secret).toString('hex'),
      created_by: acting.createdBy,
      created_at: new Date(now).toISOString(),
      expires_at: input.expiresAt ?? null,
      revoked_at: null,
      last_used_at: null,
      replaced_by: null,
      restrictions: storedRestrictions(input.restrictions),
      last_used_address: null,
    };
    return { row, created: { ...toApiKey(row), key } };
  }

  /**
   * Inserts a key unless its account would then hold more than the cap (plus `beyond`) of active
   * keys. The account's row lock serialises this per account, so that two at once cannot both pass.
   */
  private async insertWithinCap(
    trx: Db,
    row: ApiKeyRow,
    beyond: number,
    check?: () => Promise<void>,
  ): Promise<void> {
    await lockAccount(trx, row.account_id);
    await check?.();
    const active = await repo.countActiveApiKeys(trx, row.account_id, row.created_at);
    if (active >= this.options.maxKeysPerAccount + beyond) {
      throw new LimitError(
        `account ${row.account_id} already holds ${active} active API keys, the most this service allows; revoke one first`,
      );
    }
    await repo.insertApiKey(trx, row);
  }

  /** A page of an account's keys, oldest first, for a user who may act for it (else 403). */
  async listFor(user: KeyManager, accountId: string, request: PageRequest = {}): Promise<ApiKeyPage> {
    mayActFor(user, accountId);
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

  /** One key of an account the user may act for; any other is 404, like one that does not exist. */
  async getFor(user: KeyManager, keyId: string): Promise<ApiKey> {
    const row = await repo.findApiKey(this.db, keyId);
    if (!row || !user.accounts.includes(row.account_id)) throw new NotFoundError('no such API key');
    return this.toApiKey(row);
  }

  /** One key, of any account (`playbook keys`); 404 when it does not exist. */
  async get(keyId: string): Promise<ApiKey> {
    const row = await repo.findApiKey(this.db, keyId);
    if (!row) throw new NotFoundError(`no API key ${keyId}`);
    return this.toApiKey(row);
  }

  /**
   * How a key of an account the user may act for was used (D32): its answers counted by bucket and
   * outcome, from what every instance has flushed and what this one has not yet, and its last use.
   * Another account's key is 404; a range past what is kept, or empty, 400.
   */
  async usageFor(user: KeyManager, keyId: string, query: KeyUsageQuery): Promise<KeyUsage> {
    return this.usageAs(userActing(user), keyId, query);
  }

  /** How a key of any account was used (`playbook keys usage`); 404 when it does not exist. */
  async usage(keyId: string, query: KeyUsageQuery): Promise<KeyUsage> {
    return this.usageAs(OPERATOR, keyId, query);
  }

  private async usageAs(acting: Acting, keyId: string, query: KeyUsageQuery): Promise<KeyUsage> {
    const row = await repo.findApiKey(this.db, keyId);
    if (!row || !acting.mayActFor(row.account_id)) throw new NotFoundError('no such API key');
    return usageReport(this.db, row, query, this.now(), this.options.usage);
  }

  /**
   * Changes a key's name, expiry and restrictions (D32), as a JSON Merge Patch: what the patch leaves
   * out is unchanged, `null` lifts an expiry or a restriction. A key of an account the user may not act
   * for is 404; a revoked or expired key is 409 `key_inactive`, a rolled one 409 `key_already_rolled`
   * (its successor is the key to change). Nothing is written on a refusal, nor for a patch that changes
   * nothing; a change is an `api_key.updated` change of the log, and every instance applies it as it
   * applies a revocation.
   */
  async updateFor(user: KeyManager, keyId: string, patch: UpdateApiKeyBody): Promise<ApiKey> {
    return this.updateAs(userActing(user), keyId, patch);
  }

  /** Changes a key as an operator (`playbook keys restrict`), of any account. */
  async update(keyId: string, patch: UpdateApiKeyBody): Promise<ApiKey> {
    return this.updateAs(OPERATOR, keyId, patch);
  }

  private async updateAs(acting: Acting, keyId: string, patch: UpdateApiKeyBody): Promise<ApiKey> {
    const now = this.now();
    const at = new Date(now).toISOString();
    const expiresAt = patch.expiresAt ? futureTime(patch.expiresAt, now) : patch.expiresAt;
    const { row, changed } = await this.options.writes.run(
      'key-update',
      { ...acting.writer, at },
      async (write) => {
        const current = await repo.findApiKey(write.db, keyId);
        if (!current || !acting.mayActFor(current.account_id)) throw new NotFoundError('no such API key');
        refuseChangeOf(current, now);
        const restrictions = mergeRestrictions(
          readRestrictions(current.restrictions),
          patch.restrictions,
          this.options.deploymentRate,
        );
        const next: ApiKeyRow = {
          ...current,
          name: patch.name ?? current.name,
          expires_at: expiresAt === undefined ? current.expires_at : expiresAt,
          restrictions: storedRestrictions(restrictions),
        };
        const fields = (['name', 'expires_at', 'restrictions'] as const).filter(
          (field) => next[field] !== current[field],
        );
        if (fields.length === 0) return { row: current, changed: false };
        await repo.updateApiKey(write.db, keyId, Object.fromEntries(fields.map((f) => [f, next[f]])));
        if (fields.includes('expires_at'))
          await accountCrossedThresholds(write.db, keyId, next.expires_at, now);
        const named = fields.map((field) => (field === 'expires_at' ? 'expiresAt' : field)).join(', ');
        await write.append([keyChange(current, 'api_key.updated', `API key ${keyId} changed: ${named}`)]);
        return { row: next, changed: true };
      },
    );
    // Every instance reads the key again at once rather than within a second, as after a roll.
    if (changed) await this.options.revocations.publish(`${KEY_CHANGED_PREFIX}${keyId}`);
    return this.toApiKey(row);
  }

  /**
   * Revokes a key of an account the user may act for. Idempotent; a key of another account is
   * answered exactly like one that does not exist (404), so that key ids reveal nothing.
   */
  async revokeFor(user: KeyManager, keyId: string): Promise<void> {
    const row = await repo.findApiKey(this.db, keyId);
    if (!row || !user.accounts.includes(row.account_id)) throw new NotFoundError('no such API key');
    await this.revoke(keyId, { type: 'user', id: user.subject }, user.requestId);
  }

  async revoke(
    keyId: string,
    actor: ChangeActor = { type: 'operator' },
    requestId?: string,
  ): Promise<RevokeOutcome> {
    const at = new Date(this.now()).toISOString();
    const outcome = await this.options.writes.run(
      'key-revoke',
      { actor, requestId, at },
      async (write: WriteScope): Promise<RevokeOutcome> => {
        const revoked = await repo.revokeApiKey(write.db, keyId, at);
        const row = await repo.findApiKey(write.db, keyId);
        if (!row) return 'not-found';
        if (!revoked) return 'already-revoked';
        const leaked = actor.type === 'leak-report';
        await write.append([
          keyChange(
            row,
            leaked ? 'api_key.leak_revoked' : 'api_key.revoked',
            `API key ${keyId} revoked${leaked ? ': reported leaked' : ''}`,
          ),
        ]);
        return 'revoked';
      },
    );
    // Announced even when already revoked: a cheap repeat that heals a lost announcement.
    if (outcome !== 'not-found') await this.options.revocations.publish(keyId);
    return outcome;
  }

  /**
   * The verdict on a token reported as leaked (D22): a key of this deployment whose secret matches
   * is a true positive and is revoked at once (if it was not already); anything else is a false
   * positive. The secret is compared in constant time, as on every request.
   */
  async revokeLeaked(token: string, url?: string, requestId?: string): Promise<LeakVerdict> {
    const parsed = parseApiKey(token);
    if (!parsed || parsed.environment !== this.options.environment) return 'false_positive';
    const row = await repo.findApiKey(this.db, parsed.keyId);
    const digest = this.options.hasher.digest(parsed.secret);
    const stored = row ? Buffer.from(row.secret_hash, 'hex') : Buffer.alloc(digest.length);
    if (!row || !digestsEqual(digest, stored)) return 'false_positive';
    await this.revoke(row.id, { type: 'leak-report', ...(url === undefined ? {} : { id: url }) }, requestId);
    return 'true_positive';
  }
}

/** Who acts on keys: whom the change log names, who is stored as a key's creator, and for which accounts. */
interface Acting {
  readonly writer: { readonly actor: ChangeActor; readonly requestId?: string | undefined };
  readonly createdBy: string;
  mayActFor(accountId: string): boolean;
}

/** A user, for the accounts their access token names. */
function userActing(user: KeyManager): Acting {
  return {
    writer: { actor: { type: 'user', id: user.subject }, requestId: user.requestId },
    createdBy: user.subject,
    mayActFor: (accountId) => user.accounts.includes(accountId),
  };
}

/** An operator of the deployment (the command line on its storage), for every account. */
const OPERATOR: Acting = {
  writer: { actor: { type: 'operator' } },
  createdBy: 'operator',
  mayActFor: () => true,
};

/** The change a key event appends to the log, under the key's account. */
function keyChange(
  row: Pick<ApiKeyRow, 'id' | 'account_id'>,
  type: NewChange['type'],
  summary: string,
): NewChange {
  return { namespace: row.account_id, type, target: { kind: 'api_key', id: row.id }, summary };
}

/** An RFC 3339 time in the future, in UTC milliseconds; else a 400 naming `expiresAt`. */
function futureTime(text: string, now: number): string {
  const at = Date.parse(text);
  if (Number.isNaN(at)) throw InputError.of('body', 'expiresAt', 'must be an RFC 3339 date-time');
  if (at <= now) throw InputError.of('body', 'expiresAt', 'must be in the future');
  return new Date(at).toISOString();
}

/**
 * A key that no longer works, or that a roll replaced, is not changed (D32): a revoked or expired one
 * would come back to life with a new expiry, and a rolled one hands over to its successor.
 */
function refuseChangeOf(row: ApiKeyRow, now: number): void {
  if (row.revoked_at !== null) {
    throw new ConflictError('the API key is revoked; create a new key instead', 'key_inactive');
  }
  if (row.replaced_by !== null) throw new KeyAlreadyRolledError(row.replaced_by);
  if (row.expires_at !== null && Date.parse(row.expires_at) <= now) {
    throw new ConflictError('the API key has expired; create a new key instead', 'key_inactive');
  }
}

/** A 403 unless the user's access token names `accountId` among the accounts it may act for. */
export function mayActFor(user: Pick<KeyManager, 'accounts'>, accountId: string): void {
  if (!user.accounts.includes(accountId)) {
    throw new ForbiddenError('the access token does not let this user act for that account');
  }
}
