import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readChangesAfter, readHead } from '../../src/changes/change-log.js';
import { UnitOfWork } from '../../src/changes/unit-of-work.js';
import { createDatabases, type Databases } from '../../src/db/create-db.js';
import { WriteContentionError } from '../../src/foundation/errors.js';
import { Metrics } from '../../src/observability/metrics.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { accountChange, OPERATOR, writeCounts } from '../helpers/changes.js';
import { sleep } from '../helpers/wait.js';

/**
 * D26 on PostgreSQL: a write of another process waits for the writers' turn as a lock, a bounded
 * wait (lock_timeout) that counts as a conflict and is tried again; it never turns into the statement
 * timeout's 503 "the database did not answer", and never into a 500.
 */
describe('the writers’ turn across processes on PostgreSQL (D26)', () => {
  let backend: TestBackend;
  let other: Databases;

  beforeAll(async () => {
    backend = await createTestBackend();
    // Another process: a pool of its own on the same database.
    other = createDatabases({ kind: 'postgres', url: backend.env.PLAYBOOK_DATABASE_URL! });
  });
  afterAll(async () => {
    await other.close();
    await backend.cleanup();
  });

  const holdTurn = (ms: number) =>
    new UnitOfWork(backend.databases.primary).run('import', OPERATOR, async (write) => {
      await write.append([accountChange('holder')]);
      await sleep(ms);
    });

  it('waits through a turn held longer than one wait, then commits after it, numbered after it', async () => {
    const start = await readHead(backend.databases.primary);
    const holder = holdTurn(700);
    await sleep(50);
    const retries: number[] = [];
    const metrics = new Metrics();
    const waiting = new UnitOfWork(other.primary, { turnWaitMs: 200, backoffMs: 10, metrics }).run(
      'account-set',
      OPERATOR,
      (write) => write.append([accountChange('waiter')]),
      (attempt) => retries.push(attempt),
    );
    await holder;
    await waiting;
    expect(retries.length).toBeGreaterThan(0);
    // Each wait that timed out is a conflict, counted; the commit is counted once, with its one change.
    expect(await writeCounts(metrics)).toEqual({
      'account-set conflict': retries.length,
      'account-set committed': 1,
      'account.plan_changed': 1,
    });
    const changes = await readChangesAfter(backend.databases.primary, start, 10);
    expect(changes.map((c) => [c.seq, c.namespace])).toEqual([
      [start + 1, 'holder'],
      [start + 2, 'waiter'],
    ]);
  });

  it('gives up with 503 (WriteContentionError) when the turn stays held past every attempt, writing nothing', async () => {
    const start = await readHead(backend.databases.primary);
    const holder = holdTurn(1500);
    await sleep(50);
    const metrics = new Metrics();
    const waiting = new UnitOfWork(other.primary, {
      turnWaitMs: 100,
      backoffMs: 5,
      attempts: 3,
      metrics,
    }).run('account-set', OPERATOR, (write) => write.append([accountChange('gave-up')]));
    await expect(waiting).rejects.toBeInstanceOf(WriteContentionError);
    // Two conflicts tried again, the third given up: busy, and no change counted.
    expect(await writeCounts(metrics)).toEqual({ 'account-set conflict': 2, 'account-set busy': 1 });
    await holder;
    const changes = await readChangesAfter(backend.databases.primary, start, 10);
    expect(changes.map((c) => c.namespace)).toEqual(['holder']);
  });
});
