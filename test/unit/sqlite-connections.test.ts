import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Kysely, sql } from 'kysely';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createDatabases, type Databases, sqliteDriverName } from '../../src/db/create-db.js';
import { migrateToLatest } from '../../src/db/migrate.js';
import { SqliteWriterDialect } from '../../src/db/sqlite-writer.js';
import type { Database } from '../../src/db/tables.js';
import { waitFor } from '../helpers/wait.js';

/**
 * D20 on the embedded default: reads go through a connection of their own, which sees every commit
 * at once and never waits for a write transaction; the writer makes no checkpoint of its own, and its
 * thread copies committed WAL frames into the database file on a connection of its own instead.
 */
describe('SQLite: a reader beside the writer, checkpoints off the event loop', () => {
  let dir: string;
  let file: string;
  let databases: Databases;

  beforeEach(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'playbook-sqlite-'));
    file = path.join(dir, 'playbook.sqlite');
    databases = createDatabases({ kind: 'sqlite', path: file });
    await migrateToLatest(databases);
  });
  afterEach(async () => {
    await databases.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  const accountCount = async (db: Databases['reader']) =>
    Number(
      (
        await db
          .selectFrom('accounts')
          .select((eb) => eb.fn.countAll().as('n'))
          .executeTakeFirstOrThrow()
      ).n,
    );
  const account = (id: string) => ({ id, name: id, plan: 'free', created_at: 'now', updated_at: 'now' });

  it('reads are answered while a write transaction is open, and see its writes once it commits', async () => {
    expect(databases.reader).not.toBe(databases.primary);
    let release!: () => void;
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    let inside!: () => void;
    const entered = new Promise<void>((resolve) => {
      inside = resolve;
    });
    const writing = databases.primary.transaction().execute(async (trx) => {
      await trx.insertInto('accounts').values(account('written')).execute();
      inside();
      await held;
    });
    await entered;
    // On one connection this read would wait for the transaction, which waits for this read.
    expect(await accountCount(databases.reader)).toBe(0);
    release();
    await writing;
    expect(await accountCount(databases.reader)).toBe(1);
  });

  it('the writer leaves checkpoints to its thread, which copies committed frames into the file', async () => {
    const autocheckpoint = await sql<{ wal_autocheckpoint: number }>`pragma wal_autocheckpoint`.execute(
      databases.primary,
    );
    expect(autocheckpoint.rows[0]?.wal_autocheckpoint).toBe(0);
    const before = fs.statSync(file).size;
    await databases.primary.transaction().execute(async (trx) => {
      for (let i = 0; i < 2000; i++)
        await trx
          .insertInto('accounts')
          .values(account(`account-${i}-${'x'.repeat(200)}`))
          .execute();
    });
    // Committed frames are in the WAL; the worker, looking every few milliseconds, copies them.
    await waitFor('the WAL copied into the database file', () => fs.statSync(file).size !== before, 5000);
    expect(fs.statSync(file).size).toBeGreaterThan(before);
    expect(await accountCount(databases.reader)).toBe(2000);
  });

  it('checkpoints that cannot be made are given back to the writer, which says so once', async () => {
    const warnings: string[] = [];
    const db = new Kysely<Database>({
      dialect: new SqliteWriterDialect({
        file: path.join(dir, 'other.sqlite'),
        driver: sqliteDriverName(),
        pragmas: ['journal_mode = WAL'],
        checkpoints: true,
        statements: 10,
        checkpointFile: path.join(dir, 'missing', 'db.sqlite'),
        onWarning: (message) => warnings.push(message),
        onFailure: () => {},
      }),
    });
    try {
      const autocheckpoint = await sql<{ wal_autocheckpoint: number }>`pragma wal_autocheckpoint`.execute(db);
      expect(autocheckpoint.rows[0]?.wal_autocheckpoint).toBe(1000);
      expect(warnings).toHaveLength(1);
      expect(warnings[0]).toMatch(
        /checkpoints are back on the writer: .*(directory does not exist|unable to open)/i,
      );
    } finally {
      await db.destroy();
    }
  });
});
