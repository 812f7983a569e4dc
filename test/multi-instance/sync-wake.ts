import { performance } from 'node:perf_hooks';
import { expect } from 'vitest';
import { publishedResource } from '../helpers/publish-bodies.js';
import { type Page, syncRequest, syncToEnd } from '../helpers/sync-feed.js';
import { waitFor } from '../helpers/wait.js';
import { type Instance, storeKey, WITHIN_MS } from './support.js';

/**
 * D27 across instances: a sync request held on `held` is answered within a second of a write committed
 * on `writer`, whichever way the instances learn of it (the database poll, or Redis).
 */
export async function expectWokenAcross(writer: Instance, held: Instance, account: string): Promise<void> {
  const reader = { 'x-api-key': (await storeKey(held, account)).key };
  const writes = { 'x-api-key': (await storeKey(writer, account, ['playbook:read', 'playbook:write'])).key };
  const made = await writer.app.inject({
    method: 'PUT',
    url: '/v3/playbook/catalogs/org/woken',
    headers: writes,
    payload: { name: 'Woken', version: '1', resources: [publishedResource('first')] },
  });
  expect(made.statusCode, made.body).toBe(201);
  await waitFor('the catalog on the holding instance', async () => {
    const synced = await syncToEnd(held.app, reader);
    return synced.items.some((item) => item.catalog?.slug === 'woken');
  });
  let { syncToken } = await syncToEnd(held.app, reader);
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
