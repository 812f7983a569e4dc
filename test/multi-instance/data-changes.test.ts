import { performance } from 'node:perf_hooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { dataChanges, startInstance, WITHIN_MS } from './support.js';

/**
 * Answers kept in memory follow the data (the read path follows the change log): an import made by
 * another process shows on every instance within a second, through the database poll alone (the
 * embedded default, or no Redis), and at once through Redis when it is configured.
 */

describe('imports seen by every instance', () => {
  let backend: TestBackend;
  const { importCatalog, shownAfter, warm } = dataChanges(() => backend);

  beforeAll(async () => {
    backend = await createTestBackend();
    await importCatalog('first');
  });
  afterAll(async () => {
    await backend?.cleanup();
  });

  it('through the database poll alone, within a second, on instances that share no Redis', async () => {
    const a = await startInstance('A', backend, {});
    const b = await startInstance('B', backend, {});
    try {
      await warm([a, b]);
      await importCatalog('by-poll');
      const committedAt = performance.now();
      for (const instance of [a, b]) {
        expect(await shownAfter(instance, 'by-poll', committedAt)).toBeLessThan(WITHIN_MS);
      }
    } finally {
      await a.close();
      await b.close();
    }
  });
});
