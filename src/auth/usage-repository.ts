import { sql } from 'kysely';
import { chunk, rowsPerInsert } from '../db/batches.js';
import type { ApiKeyUsageTable, Db } from '../db/tables.js';

/**
 * Storage of keys' usage by hour (D32), written by the usage recorder and read by the usage report.
 * Plain functions that take `db` first.
 */

/** The outcomes a key's answers are counted in, in the order of their columns. */
export const OUTCOMES = ['success', 'clientError', 'unauthorized', 'rateLimited', 'serverError'] as const;
export type Outcome = (typeof OUTCOMES)[number];

/** One key's counts in one hour, by outcome in the order of `OUTCOMES`. */
export interface UsageRow {
  readonly keyId: string;
  /** The hour's start, RFC 3339. */
  readonly start: string;
  readonly counts: readonly number[];
}

const COLUMNS = ['success', 'client_error', 'unauthorized', 'rate_limited', 'server_error'] as const;
const ROWS_PER_STATEMENT = Math.min(500, rowsPerInsert(2 + COLUMNS.length));

/** Adds `rows` to what is stored: a row of the same key and hour gains their counts. */
export async function addUsage(db: Db, rows: readonly UsageRow[]): Promise<void> {
  for (const slice of chunk(rows, ROWS_PER_STATEMENT)) {
    await db
      .insertInto('api_key_usage')
      .values(
        slice.map((row) => {
          const values: ApiKeyUsageTable = { key_id: row.keyId, bucket_start: row.start } as ApiKeyUsageTable;
          COLUMNS.forEach((column, index) => {
            values[column] = row.counts[index] ?? 0;
          });
          return values;
        }),
      )
      .onConflict((conflict) =>
        conflict
          .columns(['key_id', 'bucket_start'])
          .doUpdateSet(
            Object.fromEntries(
              COLUMNS.map((column) => [
                column,
                sql`${sql.ref(`api_key_usage.${column}`)} + ${sql.ref(`excluded.${column}`)}`,
              ]),
            ),
          ),
      )
      .execute();
  }
}

/** The hours of one key that start in `[from, to)`, in order. */
export async function readUsage(db: Db, keyId: string, from: string, to: string): Promise<UsageRow[]> {
  const rows = await db
    .selectFrom('api_key_usage')
    .selectAll()
    .where('key_id', '=', keyId)
    .where('bucket_start', '>=', from)
    .where('bucket_start', '<', to)
    .orderBy('bucket_start')
    .execute();
  return rows.map((row) => ({
    keyId: row.key_id,
    start: row.bucket_start,
    counts: COLUMNS.map((column) => Number(row[column])),
  }));
}

/** Deletes the hours that start before `before`. */
export async function pruneUsage(db: Db, before: string): Promise<void> {
  await db.deleteFrom('api_key_usage').where('bucket_start', '<', before).execute();
}
