import type { Db } from '../db/tables.js';
import { InputError } from '../errors.js';

/** Account ids are opaque to the service but must be printable and bounded. */
export const ACCOUNT_ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;

export async function findAccount(db: Db, accountId: string) {
  return db.selectFrom('accounts').selectAll().where('id', '=', accountId).executeTakeFirst();
}

/** Creates the account or updates the fields given; a new account's plan is `free` (D6). */
export async function setAccount(
  db: Db,
  accountId: string,
  changes: { name?: string; plan?: string },
): Promise<{ id: string; plan: string; created: boolean }> {
  if (!ACCOUNT_ID_PATTERN.test(accountId)) {
    throw InputError.of(
      'path',
      'accountId',
      'must be 1-128 characters of letters, digits, ".", "_", ":" or "-"',
    );
  }
  return db.transaction().execute(async (trx) => {
    const now = new Date().toISOString();
    const existing = await findAccount(trx, accountId);
    if (!existing) {
      const plan = changes.plan ?? 'free';
      await trx
        .insertInto('accounts')
        .values({ id: accountId, name: changes.name ?? null, plan, created_at: now, updated_at: now })
        .execute();
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
    return { id: accountId, plan: changes.plan ?? existing.plan, created: false };
  });
}

/**
 * Creates the account with plan `free` unless it exists, on the caller's connection or transaction
 * (`playbook import --account` creates its account inside the import's transaction, D15).
 *
 * @example
 * await db.transaction().execute((trx) => createAccountIfAbsent(trx, 'acme', new Date().toISOString()));
 */
export async function createAccountIfAbsent(db: Db, accountId: string, now: string): Promise<void> {
  await db
    .insertInto('accounts')
    .values({ id: accountId, name: null, plan: 'free', created_at: now, updated_at: now })
    .onConflict((oc) => oc.column('id').doNothing())
    .execute();
}
