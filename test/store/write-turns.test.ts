import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChangeFollower, type FollowedChanges } from '../../src/changes/change-follower.js';
import { readHead } from '../../src/changes/change-log.js';
import { UnitOfWork, type WriteScope } from '../../src/changes/unit-of-work.js';
import type { Db } from '../../src/db/tables.js';
import { WriteContentionError } from '../../src/foundation/errors.js';
import { Metrics } from '../../src/observability/metrics.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { accountChange, OPERATOR, writeCounts } from '../helpers/changes.js';

/**
 * D26: writes take turns, and what follows the log never loses a change. In this process a write that
 * waited too long behind the earlier ones gives up with 503 and writes nothing; a follower whose read
 * of the log fails reads it again at its next step.
 */
describe('writers take turns; the follower loses nothing (D26)', () => {
  let backend: TestBackend;

  beforeAll(async () => {
    backend = await createTestBackend();
  });
  afterAll(async () => {
    await backend.cleanup();
  });

  it('a write queued behind a long one gives up after queueWaitMs with 503, and the ones after it still run in turn', async () => {
    const metrics = new Metrics();
    const writes = new UnitOfWork(backend.databases.primary, { queueWaitMs: 150, metrics });
    let release = () => {};
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    const long = writes.run('account-set', OPERATOR, async (write) => {
      await held;
      await write.append([accountChange('long')]);
    });
    const start = await readHead(backend.databases.primary);
    const queued = writes.run('account-set', OPERATOR, async (write) =>
      write.append([accountChange('queued')]),
    );
    await expect(queued).rejects.toBeInstanceOf(WriteContentionError);
    const after = writes.run('account-set', OPERATOR, async (write) =>
      write.append([accountChange('after')]),
    );
    release();
    await long;
    await after;
    const head = await readHead(backend.databases.primary);
    // The long write, then the one after it; nothing of the one that gave up.
    expect(head).toBe(start + 2);
    // The one that gave up is busy and never reached a transaction; the two others committed.
    expect(await writeCounts(metrics)).toEqual({
      'account-set busy': 1,
      'account-set committed': 2,
      'account.plan_changed': 2,
    });
  });

  it('a follower whose read of the log fails reads the same changes at its next step', async () => {
    const db = backend.databases.reader;
    let failNext = false;
    const flaky = new Proxy(db, {
      get(target, property) {
        const value = Reflect.get(target, property, target) as unknown;
        if (property === 'selectFrom') {
          return (table: string) => {
            if (table === 'changes' && failNext) {
              failNext = false;
              throw new Error('the replica went away');
            }
            return (value as Db['selectFrom']).call(target, table as 'changes');
          };
        }
        return typeof value === 'function' ? value.bind(target) : value;
      },
    }) as Db;
    const follower = new ChangeFollower(flaky);
    const seen: FollowedChanges[] = [];
    follower.onChange((followed) => seen.push(followed));
    await follower.check();
    await new UnitOfWork(backend.databases.primary).run('account-set', OPERATOR, (write: WriteScope) =>
      write.append([accountChange('flaky-a'), accountChange('flaky-b')]),
    );
    failNext = true;
    await follower.check();
    expect(seen).toEqual([]);
    await follower.check();
    expect(seen).toHaveLength(1);
    expect(seen[0]?.startAfresh).toBe(false);
    expect(seen[0]?.changes.map((c) => c.namespace)).toEqual(['flaky-a', 'flaky-b']);
    follower.stop();
  });
});
