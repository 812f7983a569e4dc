import { afterAll, beforeAll, describe, it } from 'vitest';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { givenAccount } from '../helpers/fixtures.js';
import { waitFor } from '../helpers/wait.js';
import { startInstance } from './support.js';
import { expectWokenAcross } from './sync-wake.js';

/** D27 with Redis: the holding instance learns of the write at once, not at a poll an hour away. */
describe('held sync requests across instances, through Redis', () => {
  let backend: TestBackend;

  beforeAll(async () => {
    backend = await createTestBackend();
    await givenAccount(backend.databases.primary, 'acme');
  });
  afterAll(async () => {
    await backend?.cleanup();
  });

  it('a write on A wakes a request held on B, whose poll would not come for an hour, within a second', async () => {
    const redisUrl = backend.redisUrl;
    if (!redisUrl) throw new Error('the production backend has no Redis');
    const a = await startInstance('A', backend, { redisUrl });
    const b = await startInstance('B', backend, { redisUrl, changePollMs: 3_600_000 });
    try {
      await waitFor("both instances' Redis channels", async () => (await a.redisReady()) && b.redisReady());
      await expectWokenAcross(a, b, 'acme');
    } finally {
      await a.close();
      await b.close();
    }
  });
});
