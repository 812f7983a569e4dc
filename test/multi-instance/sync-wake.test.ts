import { afterAll, beforeAll, describe, it } from 'vitest';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { givenAccount } from '../helpers/fixtures.js';
import { startInstance } from './support.js';
import { expectWokenAcross } from './sync-wake.js';

/**
 * D27: a sync request held on one instance is answered within a second of a write on another, through
 * the database poll alone (the embedded default, or no Redis).
 */
describe('held sync requests across instances', () => {
  let backend: TestBackend;

  beforeAll(async () => {
    backend = await createTestBackend();
    await givenAccount(backend.databases.primary, 'acme');
  });
  afterAll(async () => {
    await backend?.cleanup();
  });

  it('a write on A wakes a request held on B within a second, through the database poll alone', async () => {
    const a = await startInstance('A', backend, {});
    const b = await startInstance('B', backend, {});
    try {
      await expectWokenAcross(a, b, 'acme');
    } finally {
      await a.close();
      await b.close();
    }
  });
});
