import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createDatabases, type Databases, sqliteDriverName } from '../../src/db/create-db.js';
import { migrateToLatest } from '../../src/db/migrate.js';
import { SqliteCheckpointer } from '../../src/db/sqlite-checkpointer.js';

/**
 * D20 on the embedded default: reads go through a connection of their own, which sees every commit
 * at once and never waits for a write transaction; the writer makes no checkpoint of its own, and a
 * worker thread copies committed WAL frames into the database file instead.
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

  it('the writer leaves checkpoints to the worker, which copies committed frames into the file', async () => {
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
    const deadline = Date.now() + 5000;
    while (fs.statSync(file).size === before && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    expect(fs.statSync(file).size).toBeGreaterThan(before);
    expect(await accountCount(databases.reader)).toBe(2000);
  });

  it('a checkpoint thread that cannot work says so once, and stopping it after does not wait', async () => {
    const failures: string[] = [];
    const checkpointer = new SqliteCheckpointer(
      path.join(dir, 'missing', 'db.sqlite'),
      sqliteDriverName(),
      (why) => failures.push(why),
    );
    const deadline = Date.now() + 5000;
    while (failures.length === 0 && Date.now() < deadline)
      await new Promise((resolve) => setTimeout(resolve, 20));
    expect(failures).toHaveLength(1);
    expect(failures[0]).toMatch(/directory does not exist|unable to open/i);
    await checkpointer.stop();
    expect(failures).toHaveLength(1);
  });

  it('a running checkpoint thread stops when asked, without being told of a failure', async () => {
    const failures: string[] = [];
    const checkpointer = new SqliteCheckpointer(file, sqliteDriverName(), (why) => failures.push(why));
    await new Promise((resolve) => setTimeout(resolve, 100));
    await checkpointer.stop();
    await checkpointer.stop();
    expect(failures).toEqual([]);
  });
});
