import { sql } from 'kysely';
import { everyColumnOf, PreparedQuery } from '../db/prepared-query.js';
import type { ApiKeyRow, Db, NewApiKey } from '../db/tables.js';
import type { PageWindow } from '../foundation/paging.js';

/**
 * Storage of API keys. Plain functions that take `db` (or a transaction) first, so that transactions
 * compose at the call site.
 */

/** A key row with the plan of its account, as the verifier needs it. */
export type ApiKeyWithPlan = ApiKeyRow & { plan: string };

export async function insertApiKey(db: Db, row: NewApiKey): Promise<void> {
  await db.insertInto('api_keys').values(row).execute();
}

export async function findApiKey(db: Db, keyId: string): Promise<ApiKeyRow | undefined> {
  return db.selectFrom('api_keys').selectAll().where('id', '=', keyId).executeTakeFirst();
}

const KEY_COLUMNS = everyColumnOf<ApiKeyRow>()([
  'id',
  'account_id',
  'name',
  'scopes',
  'environment',
  'secret_hash',
  'created_by',
  'created_at',
  'expires_at',
  'revoked_at',
  'last_used_at',
  'replaced_by',
  'restrictions',
  'last_used_address',
]);

/**
 * A key with its account's plan, built once: each key in use is read again every second (D8), so a
 * thousand keys in use are a thousand of these reads a second (D30).
 */
const KEY_WITH_PLAN = new PreparedQuery(['keyId'], (db, slot, _shape: 'one') =>
  db
    .selectFrom('api_keys')
    .innerJoin('accounts', 'accounts.id', 'api_keys.account_id')
    .select(KEY_COLUMNS.map((column) => `api_keys.${column}` as const))
    .select('accounts.plan')
    .where('api_keys.id', '=', slot.keyId),
);

/** One primary-key lookup joined to the account, for verification. */
export async function findApiKeyWithPlan(db: Db, keyId: string): Promise<ApiKeyWithPlan | undefined> {
  const [row] = await KEY_WITH_PLAN.run(db, 'one', { keyId });
  return row;
}

/**
 * An account's keys, oldest first, revoked ones included (they are its audit trail): all of them, or
 * the rows of one page.
 */
export async function listApiKeys(db: Db, accountId: string, window?: PageWindow): Promise<ApiKeyRow[]> {
  let query = db
    .selectFrom('api_keys')
    .selectAll()
    .where('account_id', '=', accountId)
    .orderBy('created_at')
    .orderBy('id');
  if (window) query = query.limit(window.limit).offset(window.offset);
  return query.execute();
}

export async function countApiKeys(db: Db, accountId: string): Promise<number> {
  const row = await db
    .selectFrom('api_keys')
    .select((eb) => eb.fn.countAll<number | string>().as('count'))
    .where('account_id', '=', accountId)
    .executeTakeFirstOrThrow();
  return Number(row.count);
}

/** Keys of an account that still work at `now`: not revoked, not expired. */
export async function countActiveApiKeys(db: Db, accountId: string, now: string): Promise<number> {
  const row = await db
    .selectFrom('api_keys')
    .select((eb) => eb.fn.countAll<number | string>().as('count'))
    .where('account_id', '=', accountId)
    .where('revoked_at', 'is', null)
    .where((eb) => eb.or([eb('expires_at', 'is', null), eb('expires_at', '>', now)]))
    .executeTakeFirstOrThrow();
  return Number(row.count);
}

/** What a change of a key (D32) may set: its name, its expiry and its restrictions. */
export type ApiKeyChanges = Partial<Pick<ApiKeyRow, 'name' | 'expires_at' | 'restrictions'>>;

export async function updateApiKey(db: Db, keyId: string, changes: ApiKeyChanges): Promise<void> {
  await db.updateTable('api_keys').set(changes).where('id', '=', keyId).execute();
}

/** Marks a key revoked; returns false when it already was (or does not exist). */
export async function revokeApiKey(db: Db, keyId: string, at: string): Promise<boolean> {
  const result = await db
    .updateTable('api_keys')
    .set({ revoked_at: at })
    .where('id', '=', keyId)
    .where('revoked_at', 'is', null)
    .executeTakeFirst();
  return result.numUpdatedRows > 0n;
}

/**
 * The old key of a roll (D22, D29): it names its successor, and its expiry comes forward to `at`
 * (never later than it was). Only a key without a successor is marked; false when it had one.
 */
export async function markRolled(db: Db, keyId: string, successor: string, at: string): Promise<boolean> {
  const result = await db
    .updateTable('api_keys')
    .set((eb) => ({
      replaced_by: successor,
      expires_at: eb
        .case()
        .when(eb.or([eb('expires_at', 'is', null), eb('expires_at', '>', at)]))
        .then(at)
        .else(eb.ref('expires_at'))
        .end(),
    }))
    .where('id', '=', keyId)
    .where('replaced_by', 'is', null)
    .executeTakeFirst();
  return result.numUpdatedRows > 0n;
}

/** When a key was last used, and from which client address when that is known. */
export interface LastUse {
  readonly at: string;
  readonly address: string | null;
}

/**
 * Records when keys were last used and from where, in one statement per batch. A time never moves
 * backwards, and an address moves with its time, so that two processes flushing in either order leave
 * the later use.
 */
export async function recordLastUsed(db: Db, usage: ReadonlyMap<string, LastUse>): Promise<void> {
  const entries = [...usage];
  if (entries.length === 0) return;
  const id = sql.ref('id');
  const usedAt = sql.ref('last_used_at');
  // One \`when\` per key, joined once: Kysely's case builder copies its list of \`when\`s at each one it
  // adds, which for a batch of 500 keys was 125,000 copies on the event loop every flush. Both columns
  // compare with the time as stored before this statement.
  const later = ([keyId, use]: [string, LastUse]) =>
    sql`when ${id} = ${keyId} and (${usedAt} is null or ${usedAt} < ${use.at}) then ${use.at}`;
  const from = ([keyId, use]: [string, LastUse]) =>
    sql`when ${id} = ${keyId} and (${usedAt} is null or ${usedAt} <= ${use.at}) then ${use.address}`;
  const addressed = entries.filter(([, use]) => use.address !== null);
  await db
    .updateTable('api_keys')
    .set({
      last_used_at: sql<string>`case ${sql.join(entries.map(later), sql` `)} else ${usedAt} end`,
      ...(addressed.length === 0
        ? {}
        : {
            last_used_address: sql<string>`case ${sql.join(addressed.map(from), sql` `)} else ${sql.ref('last_used_address')} end`,
          }),
    })
    .where(
      'id',
      'in',
      entries.map(([keyId]) => keyId),
    )
    .execute();
}
