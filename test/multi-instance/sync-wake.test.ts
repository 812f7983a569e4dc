import { afterAll, beforeAll, describe, it } from 'vitest';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { givenAccount } from '../helpers/fixtures.js';
import type { Instance } from './support.js';
import { expectRevokedAcross, expectWokenAcross, withInstances } from './sync-wake.js';

/**
 * D27: a sync request held on one instance is answered within a second of a write on another, through
 * the database poll alone (the embedded default, or no Redis); one whose key is revoked on the other
 * meanwhile gets 401.
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

  const throughTheLog = (check: (a: Instance, b: Instance) => Promise<void>) =>
    withInstances(backend, { a: {}, b: {} }, check);

  it('a write on A wakes a request held on B within a second, through the database poll alone', () =>
    throughTheLog((a, b) => expectWokenAcross(a, b, 'acme')));

  it('a key revoked on A while its request is held on B gets 401 there when a change wakes it', () =>
    throughTheLog((a, b) => expectRevokedAcross(a, b, 'acme')));
});
