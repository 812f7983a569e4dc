import { sql } from 'kysely';
import { type Db, dialectOf } from './tables.js';

/**
 * Runs `work` in a transaction whose commit, on SQLite, does not wait for the disk: for bookkeeping
 * that a power cut may take back without harm (what it records is made again, never lost), written
 * often enough that a flush per commit would cost more than the work.
 *
 * SQLite's driver commits on the event loop's thread, and with `synchronous = FULL` each commit waits
 * for its flush to disk (milliseconds; more on a busy disk), during which no request is answered. In WAL
 * mode `synchronous = NORMAL` commits without that flush: the transaction is in the WAL at once, safe
 * from a crash of the process, and reaches the disk with the next flush (the checkpointer's, every few
 * milliseconds while the WAL changes, or the next `FULL` commit's); a power cut may lose it, whole,
 * never leave half of it. The setting belongs to the connection and cannot change inside a
 * transaction, so it is set around this one while it holds the connection, and put back after.
 *
 * PostgreSQL commits off the event loop: the transaction is an ordinary one there, and as durable.
 */
export async function deferredFlushTransaction<T>(db: Db, work: (trx: Db) => Promise<T>): Promise<T> {
  if (dialectOf(db) !== 'sqlite') return db.transaction().execute(work);
  return db.connection().execute(async (connection) => {
    const { rows } = await sql<{ synchronous: number }>`pragma synchronous`.execute(connection);
    const setting = Number(rows[0]?.synchronous);
    await sql`pragma synchronous = normal`.execute(connection);
    try {
      return await connection.transaction().execute(work);
    } finally {
      await sql`pragma synchronous = ${sql.raw(String(setting))}`.execute(connection);
    }
  });
}
