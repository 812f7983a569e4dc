import { type ColumnDefinitionBuilder, type Kysely, sql } from 'kysely';
import type { Dialect } from '../tables.js';

/**
 * D29: a key is rolled once. `api_keys.replaced_by` names the key a roll minted in its place; a key
 * that has one is not rolled again. Keys rolled before this column existed get theirs from the change
 * log, whose `api_key.rolled` changes say it in their summary ("… replaced by <keyId>"); a key rolled
 * more than once then keeps its latest successor.
 */
export async function up(db: Kysely<unknown>, dialect: Dialect): Promise<void> {
  const text = (column: ColumnDefinitionBuilder) =>
    dialect === 'postgres' ? column.modifyFront(sql`collate "C"`) : column;
  await db.schema.alterTable('api_keys').addColumn('replaced_by', 'text', text).execute();
  const rolls = await sql<{ target_id: string; summary: string }>`select target_id, summary from changes
    where type = 'api_key.rolled' order by seq`.execute(db);
  const successors = new Map<string, string>();
  for (const roll of rolls.rows) {
    const successor = /replaced by ([A-Za-z0-9]+)$/.exec(roll.summary)?.[1];
    if (successor !== undefined) successors.set(roll.target_id, successor);
  }
  for (const [keyId, successor] of successors) {
    await sql`update api_keys set replaced_by = ${successor} where id = ${keyId}`.execute(db);
  }
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('api_keys').dropColumn('replaced_by').execute();
}
