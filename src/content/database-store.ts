import { sql } from 'kysely';
import type { Db } from '../db/tables.js';
import { ContentNotFoundError, type ContentStore } from './content-store.js';

/**
 * `database-text` content, in the `content_blobs` table. Built over a transaction, its writes commit
 * or roll back with the rest of an import.
 */
export class DatabaseContentStore implements ContentStore {
  readonly backend = 'database-text' as const;

  constructor(private readonly db: Db) {}

  async put(hash: string, content: string): Promise<boolean> {
    const result = await this.db
      .insertInto('content_blobs')
      .values({ content_hash: hash, body: content })
      .onConflict((oc) => oc.column('content_hash').doNothing())
      .executeTakeFirst();
    return (result.numInsertedOrUpdatedRows ?? 0n) > 0n;
  }

  async delete(hash: string): Promise<void> {
    await this.db.deleteFrom('content_blobs').where('content_hash', '=', hash).execute();
  }

  async get(hash: string): Promise<string> {
    const row = await this.db
      .selectFrom('content_blobs')
      .select('body')
      .where('content_hash', '=', hash)
      .executeTakeFirst();
    if (!row) throw new ContentNotFoundError(hash);
    return row.body;
  }

  async check(): Promise<void> {
    await sql`select 1`.execute(this.db);
  }
}
