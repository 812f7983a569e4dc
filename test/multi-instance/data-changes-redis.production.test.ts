import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { waitFor } from '../helpers/wait.js';
import { dataChanges, startInstance, WITHIN_MS } from './support.js';

/** With Redis, an import made by another process reaches every instance at once, not at its next poll. */
describe('imports announced through Redis', () => {
  let backend: TestBackend;
  const { importCatalog, shownAfter, warm } = dataChanges(() => backend);

  beforeAll(async () => {
    backend = await createTestBackend();
    await importCatalog('first');
  });
  afterAll(async () => {
    await backend?.cleanup();
  });

  it('reach an instance whose poll would not come for an hour, within a second', async () => {
    const redisUrl = backend.redisUrl;
    if (!redisUrl) throw new Error('the production backend has no Redis');
    const a = await startInstance('A', backend, { redisUrl });
    const b = await startInstance('B', backend, { redisUrl, changePollMs: 3_600_000 });
    try {
      await waitFor("both instances' Redis channels", async () => (await a.redisReady()) && b.redisReady());
      await warm([a, b]);
      await importCatalog('by-redis', { PLAYBOOK_REDIS_URL: redisUrl });
      const committedAt = performance.now();
      expect(await shownAfter(b, 'by-redis', committedAt)).toBeLessThan(WITHIN_MS);
      expect(await shownAfter(a, 'by-redis', committedAt)).toBeLessThan(WITHIN_MS);
    } finally {
      await a.close();
      await b.close();
    }
  });
});
