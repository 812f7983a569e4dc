import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createDatabases, type Databases } from '../../src/db/create-db.js';
import { migrateToLatest, pendingMigrations } from '../../src/db/migrate.js';
import { loadConfig } from '../../src/foundation/config.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { runCli, spawnCli } from '../helpers/cli.js';

/**
 * Migrations run by `playbook migrate` (an init container, a one-off job) beside replicas that serve
 * with `--no-migrate`: two runs at once never both migrate, and a replica never starts on a schema
 * its version is ahead of.
 */

const FIRST = '0001-catalogs';

let backend: TestBackend;
let second: Databases | undefined;
beforeEach(async () => {
  backend = await createTestBackend({ migrateTo: FIRST });
});
afterEach(async () => {
  await second?.close();
  second = undefined;
  await backend.cleanup();
});

/** A second process's connections to the backend's database, as another `playbook migrate` opens them. */
function openSecond(): Databases {
  second = createDatabases(loadConfig(backend.env).database);
  return second;
}

describe('migrations at once', () => {
  it('lists what the database has not run, writing nothing', async () => {
    const pending = await pendingMigrations(backend.databases);
    expect(pending[0]).not.toBe(FIRST);
    expect(pending.length).toBeGreaterThan(5);
    expect(await pendingMigrations(backend.databases)).toEqual(pending);
    expect(await migrateToLatest(backend.databases)).toEqual(pending);
    expect(await pendingMigrations(backend.databases)).toEqual([]);
  });

  it('two runs at once: one runs every migration, the other waits for it and runs none', async () => {
    const pending = await pendingMigrations(backend.databases);
    const runs = await Promise.all([migrateToLatest(backend.databases), migrateToLatest(openSecond())]);
    expect([...runs].sort((a, b) => a.length - b.length)).toEqual([[], pending]);
    expect(await pendingMigrations(backend.databases)).toEqual([]);
  });

  it('three runs of `playbook migrate` at once: each exits 0, and each migration is applied once', async () => {
    const pending = await pendingMigrations(backend.databases);
    const env = { ...backend.env, LOG_LEVEL: 'silent' };
    const runs = await Promise.all([1, 2, 3].map(() => runCli(['migrate'], env)));
    expect(runs.map((run) => run.code)).toEqual([0, 0, 0]);
    const applied = runs.map((run) => run.stdout).filter((out) => out !== 'schema is up to date\n');
    expect(applied).toEqual([`applied ${pending.join(', ')}\n`]);
  });
});

describe('playbook serve --no-migrate', () => {
  it('refuses to start on a schema behind its version, naming `playbook migrate`, and leaves it alone', async () => {
    const pending = await pendingMigrations(backend.databases);
    const result = await runCli(['serve', '--no-migrate', '--port', '0'], {
      ...backend.env,
      LOG_LEVEL: 'silent',
    });
    expect(result.code).toBe(1);
    expect(result.stderr).toBe(
      `playbook: the database schema is behind this version of playbook (${pending.join(', ')} not run): run \`playbook migrate\`, then start again\n`,
    );
    expect(await pendingMigrations(backend.databases)).toEqual(pending);
  });

  it('serves on a schema that `playbook migrate` brought up to date', async () => {
    expect((await runCli(['migrate'], { ...backend.env, LOG_LEVEL: 'silent' })).code).toBe(0);
    const served = spawnCli(['serve', '--no-migrate', '--port', '0'], backend.env);
    try {
      await served.waitForStderr((text) => text.includes(' is serving on '), 30_000);
    } finally {
      served.child.kill('SIGTERM');
      await served.exited;
    }
  });
});
