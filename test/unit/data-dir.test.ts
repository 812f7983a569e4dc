import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { importDemoContentIfEmpty } from '../../src/composition/demo.js';
import { createServices } from '../../src/composition/services.js';
import { migrateToLatest } from '../../src/db/migrate.js';
import { loadConfig } from '../../src/foundation/config.js';

/** Every entry under a directory, with its permission bits. */
async function modes(root: string): Promise<Map<string, number>> {
  const found = new Map<string, number>();
  const walk = async (dir: string): Promise<void> => {
    found.set(path.relative(root, dir) || '.', (await fs.stat(dir)).mode & 0o777);
    for (const entry of await fs.readdir(dir, { withFileTypes: true })) {
      const full = path.join(dir, entry.name);
      if (entry.isDirectory()) await walk(full);
      else found.set(path.relative(root, full), (await fs.stat(full)).mode & 0o777);
    }
  };
  await walk(root);
  return found;
}

describe('the data directory (D21)', () => {
  let parent: string;
  let umask: number;
  beforeEach(async () => {
    parent = await fs.mkdtemp(path.join(os.tmpdir(), 'playbook-data-dir-'));
    // The common default, under which files would otherwise be created 0644 and directories 0755.
    umask = process.umask(0o022);
  });
  afterEach(async () => {
    process.umask(umask);
    await fs.rm(parent, { recursive: true, force: true });
  });

  it('is created 0700 with every file in it 0600: database, its journal, content and signing key', async () => {
    const dataDir = path.join(parent, 'nested', 'data');
    const services = createServices(loadConfig({ PLAYBOOK_DATA_DIR: dataDir }), pino({ level: 'silent' }));
    try {
      await migrateToLatest(services.databases);
      await importDemoContentIfEmpty(services, pino({ level: 'silent' }));
      const token = await services.identity.signer!.mint({
        subject: 'ada',
        accounts: ['demo'],
        ttlSeconds: 60,
      });
      expect(token.split('.')).toHaveLength(3);

      const found = await modes(dataDir);
      expect([...found.keys()]).toEqual(
        expect.arrayContaining([
          '.',
          'playbook.sqlite',
          'playbook.sqlite-wal',
          'content',
          'dev-token-signing-key.json',
        ]),
      );
      const objects = [...found.keys()].filter(
        (name) => name.startsWith('content/') && name.split('/').length === 3,
      );
      expect(objects.length).toBeGreaterThan(0);
      for (const [name, mode] of found) {
        const isDirectory = (await fs.stat(path.join(dataDir, name))).isDirectory();
        expect({ name, mode: mode.toString(8) }).toEqual({ name, mode: isDirectory ? '700' : '600' });
      }
    } finally {
      await services.close();
    }
  });

  it('keeps the mode of a directory the operator made', async () => {
    const dataDir = path.join(parent, 'data');
    await fs.mkdir(dataDir, { mode: 0o750 });
    const services = createServices(loadConfig({ PLAYBOOK_DATA_DIR: dataDir }), pino({ level: 'silent' }));
    try {
      await migrateToLatest(services.databases);
      expect((await fs.stat(dataDir)).mode & 0o777).toBe(0o750);
      expect((await fs.stat(path.join(dataDir, 'playbook.sqlite'))).mode & 0o777).toBe(0o600);
    } finally {
      await services.close();
    }
  });
});
