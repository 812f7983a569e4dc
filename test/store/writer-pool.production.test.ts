import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readHead } from '../../src/changes/change-log.js';
import { UnitOfWork } from '../../src/changes/unit-of-work.js';
import { createDatabases, type Databases, DEFAULT_POSTGRES_LIMITS } from '../../src/db/create-db.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { accountChange, OPERATOR } from '../helpers/changes.js';

/**
 * D30 on PostgreSQL: a write transaction holds a connection of its own (`Databases.writer`), never one
 * of the pool that reads queue for. With the primary's pool cut to one connection, reads are answered
 * while a write is open; on the primary's pool they waited for its commit (or for the 3 s checkout
 * limit, then 503), and every write held a tenth of an instance's reads for as long as it ran.
 */
describe('write transactions on PostgreSQL (D30)', () => {
  let backend: TestBackend;
  let databases: Databases;

  beforeAll(async () => {
    backend = await createTestBackend();
    databases = createDatabases(
      { kind: 'postgres', url: backend.env.PLAYBOOK_DATABASE_URL! },
      { ...DEFAULT_POSTGRES_LIMITS, poolSize: 1 },
    );
  });
  afterAll(async () => {
    await databases?.close();
    await backend?.cleanup();
  });

  it("reads go on through every connection of the primary's pool while a write is open, and see it once it commits", async () => {
    const start = await readHead(databases.primary);
    let opened!: () => void;
    const open = new Promise<void>((resolve) => {
      opened = resolve;
    });
    let release!: () => void;
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    const write = new UnitOfWork(databases.writer).run('account-set', OPERATOR, async (scope) => {
      await scope.append([accountChange('writer')]);
      opened();
      await gate;
    });
    await open;
    // More reads than the pool has connections, each waiting for the one before it to give its
    // connection back; none waits for the write.
    const heads = await Promise.all(Array.from({ length: 5 }, () => readHead(databases.primary)));
    expect(heads).toEqual([start, start, start, start, start]);
    const sessions = await sql<{ name: string; state: string }>`
      select application_name as name, state from pg_stat_activity
      where datname = current_database() and application_name like 'playbook%'`.execute(databases.primary);
    expect(sessions.rows).toContainEqual({ name: 'playbook-writer', state: 'idle in transaction' });
    release();
    await write;
    expect(await readHead(databases.primary)).toBe(start + 1);
  });
});
