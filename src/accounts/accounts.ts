import type { NewChange } from '../changes/change-log.js';
import type { UnitOfWork } from '../changes/unit-of-work.js';
import type { Db } from '../db/tables.js';
import { InputError } from '../foundation/errors.js';
import { ACCOUNT_ID_PATTERN } from '../schemas/identity.js';

/**
 * Accounts (D6): the one place that writes the `accounts` table and knows the default plan. Plain
 * functions that take `db` (or a transaction) first, so that transactions compose at the call site.
 */

/** The plan of a new account, and of a caller that acts for no account. */
export const DEFAULT_PLAN = 'free';

export async function findAccount(db: Db, accountId: string) {
  return db.selectFrom('accounts').selectAll().where('id', '=', accountId).executeTakeFirst();
}

/**
 * Creates the account or updates the fields given; a new account has the default plan. An operator's
 * write (`playbook accounts set`): its creation or plan change is a change of the log.
 */
export async function setAccount(
  writes: UnitOfWork,
  accountId: string,
  changes: { name?: string; plan?: string },
): Promise<{ id: string; plan: string; created: boolean }> {
  if (!ACCOUNT_ID_PATTERN.test(accountId)) {
    throw InputError.of(
      'path',
      'accountId',
      'must be 1-128 characters of letters, digits, ".", "_", ":" or "-", and not svc (the service\'s own)',
    );
  }
  return writes.run('account-set', { actor: { type: 'operator' } }, async (write) => {
    const trx = write.db;
    const now = write.context.at;
    const existing = await findAccount(trx, accountId);
    if (!existing) {
      const plan = changes.plan ?? DEFAULT_PLAN;
      await trx
        .insertInto('accounts')
        .values({ id: accountId, name: changes.name ?? null, plan, created_at: now, updated_at: now })
        .execute();
      await write.append([accountCreated(accountId, plan)]);
      return { id: accountId, plan, created: true };
    }
    const update = {
      ...(changes.name === undefined ? {} : { name: changes.name }),
      ...(changes.plan === undefined ? {} : { plan: changes.plan }),
    };
    if (Object.keys(update).length > 0) {
      await trx
        .updateTable('accounts')
        .set({ ...update, updated_at: now })
        .where('id', '=', accountId)
        .execute();
    }
    // A name is no one's view of anything; a plan decides what the account's callers see.
    if (changes.plan !== undefined && changes.plan !== existing.plan) {
      await write.append([
        {
          namespace: accountId,
          type: 'account.plan_changed',
          target: { kind: 'account', id: accountId },
          summary: `account ${accountId}: plan ${existing.plan} → ${changes.plan}`,
        },
      ]);
    }
    return { id: accountId, plan: changes.plan ?? existing.plan, created: false };
  });
}

/** The change of an account created, under its own namespace. */
export function accountCreated(accountId: string, plan = DEFAULT_PLAN): NewChange {
  return {
    namespace: accountId,
    type: 'account.created',
    target: { kind: 'account', id: accountId },
    summary: `account ${accountId} created (plan ${plan})`,
  };
}

/**
 * Holds the account's row until the transaction ends (a write that changes nothing takes PostgreSQL's
 * row lock; SQLite writes one transaction at a time anyway), so that checks of a per-account limit
 * and the write they guard run one at a time.
 */
export async function lockAccount(db: Db, accountId: string): Promise<void> {
  await db
    .updateTable('accounts')
    .set((eb) => ({ updated_at: eb.ref('updated_at') }))
    .where('id', '=', accountId)
    .execute();
}

/**
 * Creates the account with the default plan unless it exists, on the caller's transaction
 * (`playbook import --account` and key creation create theirs inside theirs); true when it did, and
 * the caller appends `accountCreated`.
 *
 * @example
 * await db.transaction().execute((trx) => createAccountIfAbsent(trx, 'acme', new Date().toISOString()));
 */
export async function createAccountIfAbsent(db: Db, accountId: string, now: string): Promise<boolean> {
  const inserted = await db
    .insertInto('accounts')
    .values({ id: accountId, name: null, plan: DEFAULT_PLAN, created_at: now, updated_at: now })
    .onConflict((oc) => oc.column('id').doNothing())
    .returning('id')
    .executeTakeFirst();
  return inserted !== undefined;
}

/** An account as its users see it (D33): its id, its display name when it has one, and its plan. */
export interface AccountSummary {
  readonly id: string;
  readonly name?: string;
  readonly plan: string;
}

/** The accounts a user may act for, described (D33: `GET /v3/identity/me`). */
export type AccountDirectory = (accountIds: readonly string[]) => Promise<AccountSummary[]>;

/**
 * The accounts named by `ids`, in that order, each as stored or, when it has no row yet (a token may
 * name an account nothing has been written for), with the default plan and no name.
 */
export async function describeAccounts(db: Db, ids: readonly string[]): Promise<AccountSummary[]> {
  if (ids.length === 0) return [];
  const rows = await db
    .selectFrom('accounts')
    .select(['id', 'name', 'plan'])
    .where('id', 'in', [...ids])
    .execute();
  const stored = new Map(rows.map((row) => [row.id, row]));
  return ids.map((id) => {
    const row = stored.get(id);
    return row?.name ? { id, name: row.name, plan: row.plan } : { id, plan: row?.plan ?? DEFAULT_PLAN };
  });
}
