import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/foundation/config.js';
import { DEPLOYMENT_KEY_FILE, loadDeploymentKeys } from '../../src/foundation/deployment-key.js';

/** The deployment's keys, which sign sync tokens and seal webhook secrets (D27, D28). */
describe('the deployment key', () => {
  let dataDir: string;
  beforeEach(async () => {
    dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'playbook-deployment-key-'));
  });
  afterEach(async () => {
    await fs.rm(dataDir, { recursive: true, force: true });
  });

  const keyText = () => randomBytes(32).toString('base64');

  it('is read from PLAYBOOK_DEPLOYMENT_KEY, base64 or base64url, several keys comma-separated', () => {
    const first = keyText();
    const second = randomBytes(48).toString('base64url');
    const config = loadConfig({ PLAYBOOK_DEPLOYMENT_KEY: ` ${first} , ${second}` });
    expect(config.deploymentKeys).toEqual([first, second]);
    expect(loadConfig({}).deploymentKeys).toBeUndefined();
  });

  it.each([
    ['not base64', 'not*base64', /key 1 is not base64/],
    ['too short', randomBytes(16).toString('base64'), /key 1 holds 16 bytes, at least 32/],
    [
      'a short second key',
      `${randomBytes(32).toString('base64')},${randomBytes(8).toString('base64')}`,
      /key 2 holds 8 bytes/,
    ],
  ])('refuses a key that is %s, naming the variable and never quoting the key', (_name, value, message) => {
    let error: unknown;
    try {
      loadConfig({ PLAYBOOK_DEPLOYMENT_KEY: value });
    } catch (caught) {
      error = caught;
    }
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as Error).message).toMatch(/^PLAYBOOK_DEPLOYMENT_KEY is not valid: /);
    expect((error as Error).message).toMatch(message);
    for (const part of value.split(',')) expect((error as Error).message).not.toContain(part);
  });

  it('signs with the first configured key and still knows the others by id', async () => {
    const [first, second] = [keyText(), keyText()];
    const keys = await loadDeploymentKeys({ dataDir, databaseKind: 'postgres', keys: [first, second] });
    const alone = await loadDeploymentKeys({ dataDir, databaseKind: 'postgres', keys: [second] });
    expect(keys.all()).toHaveLength(2);
    expect(keys.current.id).not.toBe(alone.current.id);
    expect(keys.find(alone.current.id)?.derive('sync-token')).toEqual(alone.current.derive('sync-token'));
    expect(keys.find('unknown')).toBeUndefined();
    // Nothing of the key is written into a file when it is configured.
    await expect(fs.readdir(dataDir)).resolves.toEqual([]);
  });

  it('derives a key of its own for each purpose, the same at every call', async () => {
    const keys = await loadDeploymentKeys({ dataDir, databaseKind: 'sqlite', keys: [keyText()] });
    const sync = keys.current.derive('sync-token');
    expect(sync).toHaveLength(32);
    expect(keys.current.derive('sync-token')).toEqual(sync);
    expect(keys.current.derive('webhook-secret')).not.toEqual(sync);
  });

  it('is made once in the data directory on SQLite, readable by the service alone, and kept', async () => {
    const made = await Promise.all(
      [1, 2, 3].map(() => loadDeploymentKeys({ dataDir, databaseKind: 'sqlite' })),
    );
    expect(new Set(made.map((keys) => keys.current.id)).size).toBe(1);
    const file = path.join(dataDir, DEPLOYMENT_KEY_FILE);
    expect((await fs.stat(file)).mode & 0o777).toBe(0o600);
    expect((await fs.readdir(dataDir)).filter((name) => name.endsWith('.tmp'))).toEqual([]);
    const again = await loadDeploymentKeys({ dataDir, databaseKind: 'sqlite' });
    expect(again.current.derive('sync-token')).toEqual(made[0]?.current.derive('sync-token'));
  });

  it('is required on PostgreSQL, where instances that each made their own would refuse each other', async () => {
    await expect(loadDeploymentKeys({ dataDir, databaseKind: 'postgres' })).rejects.toThrow(
      /PLAYBOOK_DEPLOYMENT_KEY is required with a PostgreSQL database/,
    );
  });

  it('refuses a key file that does not hold a key, rather than signing with it', async () => {
    await fs.writeFile(path.join(dataDir, DEPLOYMENT_KEY_FILE), 'short\n', { mode: 0o600 });
    await expect(loadDeploymentKeys({ dataDir, databaseKind: 'sqlite' })).rejects.toBeInstanceOf(ConfigError);
  });
});
