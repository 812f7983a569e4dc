import { type ColumnDefinitionBuilder, type Kysely, sql } from 'kysely';
import type { Dialect } from '../tables.js';

const DAY_MS = 86_400_000;

/**
 * D32: `api_key_expiry_notices`, the thresholds of each key's expiry accounted for (`7d`, `1d`):
 * noticed, with the time of its `api_key.expiring` change, or crossed before the expiry was set (no
 * notice). Keys whose expiry is already within a threshold when this runs get that threshold as
 * crossed: when it was crossed is not known, and a notice is made only for one crossed after the
 * expiry was set.
 */
export async function up(db: Kysely<unknown>, dialect: Dialect): Promise<void> {
  const text = (column: ColumnDefinitionBuilder) =>
    dialect === 'postgres' ? column.modifyFront(sql`collate "C"`) : column;
  await db.schema
    .createTable('api_key_expiry_notices')
    .addColumn('key_id', 'text', (c) => text(c).notNull())
    .addColumn('expires_at', 'text', (c) => text(c).notNull())
    .addColumn('threshold', 'text', (c) => text(c).notNull())
    .addColumn('noticed_at', 'text', text)
    .addPrimaryKeyConstraint('api_key_expiry_notices_pkey', ['key_id', 'expires_at', 'threshold'])
    .execute();
  // Every instance looks for keys expiring within 7 days once a minute: by index, not by a scan.
  await db.schema.createIndex('api_keys_by_expiry').on('api_keys').column('expires_at').execute();
  const now = Date.now();
  const soon = new Date(now + 7 * DAY_MS).toISOString();
  const { rows } = await sql<{ id: string; expires_at: string }>`
    select id, expires_at from api_keys
    where expires_at is not null and expires_at <= ${soon} and revoked_at is null`.execute(db);
  for (const row of rows) {
    const remaining = Date.parse(row.expires_at) - now;
    for (const [threshold, days] of [
      ['7d', 7],
      ['1d', 1],
    ] as const) {
      if (remaining > days * DAY_MS) continue;
      await sql`insert into api_key_expiry_notices (key_id, expires_at, threshold, noticed_at)
        values (${row.id}, ${row.expires_at}, ${threshold}, null)`.execute(db);
    }
  }
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropIndex('api_keys_by_expiry').execute();
  await db.schema.dropTable('api_key_expiry_notices').execute();
}
