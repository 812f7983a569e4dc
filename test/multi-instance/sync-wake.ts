import { performance } from 'node:perf_hooks';
import { expect } from 'vitest';
import type { TestBackend } from '../helpers/backend.js';
import { publishedResource } from '../helpers/publish-bodies.js';
import { type Page, publishCatalog, publishResource, syncRequest, syncToEnd } from '../helpers/sync-feed.js';
import { waitFor } from '../helpers/wait.js';
import { type Instance, type InstanceSetup, startInstance, storeKey, WITHIN_MS } from './support.js';

/**
 * Runs `check` with two instances over `backend`, A (which writes) and B (which holds), each started
 * with its setup (once both hear Redis, when they share it), and closes both whatever happens.
 */
export async function withInstances(
  backend: TestBackend,
  setups: { readonly a: InstanceSetup; readonly b: InstanceSetup },
  check: (a: Instance, b: Instance) => Promise<void>,
): Promise<void> {
  const a = await startInstance('A', backend, setups.a);
  const b = await startInstance('B', backend, setups.b);
  try {
    if (setups.a.redisUrl !== undefined) {
      await waitFor("both instances' Redis channels", async () => (await a.redisReady()) && b.redisReady());
    }
    await check(a, b);
  } finally {
    await a.close();
    await b.close();
  }
}

/**
 * A Catalog `slug` of `account` written on `writer` and seen on `held`: a reader's key stored on `held`,
 * the writer's headers, and the reader's position on `held` after it.
 */
async function followedAcross(writer: Instance, held: Instance, account: string, slug: string) {
  const readerKey = await storeKey(held, account);
  const reader = { 'x-api-key': readerKey.key };
  const writes = { 'x-api-key': (await storeKey(writer, account, ['playbook:read', 'playbook:write'])).key };
  await publishCatalog(writer.app, writes, slug);
  await waitFor('the catalog on the holding instance', async () => {
    const synced = await syncToEnd(held.app, reader);
    return synced.items.some((item) => item.catalog?.slug === slug);
  });
  const { syncToken } = await syncToEnd(held.app, reader);
  return { readerKey, reader, writes, syncToken };
}

/**
 * D27 across instances: a sync request held on `held` is answered within a second of a write committed
 * on `writer`, whichever way the instances learn of it (the database poll, or Redis).
 */
export async function expectWokenAcross(writer: Instance, held: Instance, account: string): Promise<void> {
  const followed = await followedAcross(writer, held, account, 'woken');
  const { reader, writes } = followed;
  let { syncToken } = followed;
  for (let round = 1; round <= 3; round++) {
    const answer = syncRequest(held.app, reader, { syncToken, wait: 30 });
    await waitFor('the request held', async () => held.services.sync!.held.count === 1);
    const { slug, ...body } = publishedResource(`woken-${round}-${Date.now()}`);
    const written = await writer.app.inject({
      method: 'PUT',
      url: `/v3/playbook/catalogs/org/woken/resources/${slug}`,
      headers: writes,
      payload: body,
    });
    expect(written.statusCode, written.body).toBe(201);
    const committedAt = performance.now();
    const res = await answer;
    const after = performance.now() - committedAt;
    expect(res.statusCode, res.body).toBe(200);
    expect(after, `round ${round}: answered ${after.toFixed(0)} ms after the commit`).toBeLessThan(WITHIN_MS);
    const page = res.json() as Page;
    expect(page.data.map((item) => item.resource?.slug)).toContain(slug);
    syncToken = page.nextSyncToken!;
  }
}

/**
 * D27 across instances: a key revoked on `writer` while a sync request of it is held on `held` gets
 * 401 there when a change wakes the request, never the change. `held` learns of the revocation as of
 * the change (through the change log, or Redis), and checks the key again from memory, without a read.
 */
export async function expectRevokedAcross(writer: Instance, held: Instance, account: string): Promise<void> {
  const { readerKey, reader, writes, syncToken } = await followedAcross(writer, held, account, 'revoked');
  const answer = syncRequest(held.app, reader, { syncToken, wait: 30 });
  await waitFor('the request held', async () => held.services.sync!.held.count === 1);
  const reads = held.lookups.count;

  expect(await writer.services.identity.keys.revoke(readerKey.id)).toBe('revoked');
  const slug = await publishResource(writer.app, writes, 'revoked', `after-${Date.now()}`);

  const res = await answer;
  expect(res.statusCode, res.body).toBe(401);
  expect(res.json()).toMatchObject({ code: 'unauthenticated', detail: 'the API key has been revoked' });
  expect(res.body).not.toContain(slug);
  expect(held.lookups.count).toBe(reads);
  // A new request on either instance is refused alike.
  for (const instance of [writer, held]) {
    const fresh = await syncRequest(instance.app, reader, { syncToken });
    expect(fresh.statusCode).toBe(401);
    expect(fresh.json().detail).toBe('the API key has been revoked');
  }
}
