import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { givenAccount } from '../helpers/fixtures.js';
import { expectNothingHeld, heldRefusals, type SyncParts } from '../helpers/sync.js';
import { type Page, publishCatalog, publishResource, syncRequest, syncToEnd } from '../helpers/sync-feed.js';
import { waitFor } from '../helpers/wait.js';

/**
 * D27's shares of the held requests, on both stacks: one credential holds at most
 * `PLAYBOOK_SYNC_MAX_WAITERS_PER_KEY` (20) sync requests on an instance, one account at most a tenth of
 * `PLAYBOOK_SYNC_MAX_WAITERS` (300 here: 30), whichever of its credentials hold them. Past a share a
 * request is answered at once, 429 with Retry-After, and another account's request is held as if
 * nothing else were.
 */

describe('held sync requests are shared fairly (D27)', () => {
  let backend: TestBackend;
  let identity: TestIdentity;
  let app: FastifyInstance;
  let parts: SyncParts;
  /** Writers of each account: a change of their own wakes their account's held requests. */
  const writers: Record<string, Record<string, string>> = {};
  let published = 0;

  const publish = (account: string) =>
    publishResource(app, writers[account]!, `${account}-catalog`, `r${++published}`);

  /** `count` requests with wait from `headers`, each noted as it is answered. */
  const holdMany = async (headers: Record<string, string>, count: number) => {
    const { syncToken } = await syncToEnd(app, headers);
    const answered: LightMyRequestResponse[] = [];
    const answers = Array.from({ length: count }, () =>
      (syncRequest(app, headers, { syncToken, wait: 30 }) as Promise<LightMyRequestResponse>).then((res) => {
        answered.push(res);
        return res;
      }),
    );
    return { answers, answered };
  };

  const refusals = (reason: string) => heldRefusals(identity.metrics, reason);

  const expectRateLimited = (res: LightMyRequestResponse, detail: RegExp) => {
    expect(res.statusCode, res.body).toBe(429);
    expect(res.headers['retry-after']).toBe('2');
    expect(res.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(res.json()).toMatchObject({ code: 'rate_limited', status: 429, title: 'Too many requests' });
    expect(res.json().detail).toMatch(detail);
  };

  beforeAll(async () => {
    backend = await createTestBackend();
    identity = createTestIdentity(backend, { env: { PLAYBOOK_SYNC_MAX_WAITERS: '300' } });
    app = await buildIdentityApp(backend, identity, undefined, {
      sync: { built: (built) => (parts = built) },
    });
    for (const account of ['greedy', 'patient']) {
      await givenAccount(backend.databases.primary, account);
      writers[account] = (
        await identity.mintKey({ accountId: account, scopes: ['playbook:read', 'playbook:write'] })
      ).headers;
      await publishCatalog(app, writers[account]!, `${account}-catalog`);
    }
  });
  // Whatever each test held was answered: nothing is left held, and no count is left behind.
  afterEach(() => expectNothingHeld(parts.held));
  afterAll(async () => {
    await app.close();
    await identity.close();
    await backend.cleanup();
  });

  it("a thousand requests of one key: 20 held, the rest 429 at once; another account's request is held and answers with its own change", async () => {
    const greedy = (await identity.mintKey({ accountId: 'greedy' })).headers;
    const before = await refusals('credential');
    const flood = await holdMany(greedy, 1000);
    await waitFor('980 answered at once', async () => flood.answered.length === 980);
    expect(parts.held.count).toBe(20);
    for (const res of flood.answered) {
      expectRateLimited(
        res,
        /^This credential already holds 20 sync requests waiting on this instance, as many as one credential may; ask again after Retry-After, or without wait/,
      );
    }
    expect(await refusals('credential')).toBe(before + 980);

    // Another account's request is held: neither 503 nor 429.
    const patient = (await identity.mintKey({ accountId: 'patient' })).headers;
    const other = await holdMany(patient, 1);
    await waitFor("the other account's request held", async () => parts.held.count === 21);
    expect(other.answered).toEqual([]);
    // Its own change answers it, with that change; the flood goes on waiting for its account's.
    const slug = await publish('patient');
    const [mine] = await Promise.all(other.answers);
    expect(mine!.statusCode, mine!.body).toBe(200);
    expect((mine!.json() as Page).data.map((item) => item.resource?.slug)).toEqual([slug]);
    expect(parts.held.count).toBe(20);

    const theirs = await publish('greedy');
    const held = (await Promise.all(flood.answers)).filter((res) => res.statusCode === 200);
    expect(held).toHaveLength(20);
    for (const res of held)
      expect((res.json() as Page).data.map((item) => item.resource?.slug)).toEqual([theirs]);
  });

  it("a second key of the account holds what is left of the account's share (30), then 429", async () => {
    const first = (await identity.mintKey({ accountId: 'greedy' })).headers;
    const second = (await identity.mintKey({ accountId: 'greedy' })).headers;
    const before = await refusals('account');
    const firstHeld = await holdMany(first, 20);
    await waitFor('20 held', async () => parts.held.count === 20);
    const secondHeld = await holdMany(second, 11);
    await waitFor('the account share refused one', async () => secondHeld.answered.length === 1);
    expect(parts.held.count).toBe(30);
    expectRateLimited(
      secondHeld.answered[0]!,
      /^This account already holds 30 sync requests waiting on this instance, as many as one account may, whichever of its credentials hold them/,
    );
    expect(await refusals('account')).toBe(before + 1);

    // Another account keeps its room.
    const patient = (await identity.mintKey({ accountId: 'patient' })).headers;
    const other = await holdMany(patient, 1);
    await waitFor("the other account's request held", async () => parts.held.count === 31);

    await publish('greedy');
    await publish('patient');
    for (const res of await Promise.all([...firstHeld.answers, ...secondHeld.answers, ...other.answers])) {
      expect(res.statusCode === 200 || res === secondHeld.answered[0]).toBe(true);
    }
  });

  it("a user's access tokens are one credential: a second token of the same user counts against the first's share", async () => {
    const first = await identity.tokenHeaders({ user: 'ann', accounts: ['patient'] });
    const second = await identity.tokenHeaders({ user: 'ann', accounts: ['patient'], ttlSeconds: 1800 });
    expect(second.authorization).not.toBe(first.authorization);
    const firstHeld = await holdMany(first, 20);
    await waitFor('20 held', async () => parts.held.count === 20);
    const refused = await holdMany(second, 1);
    await waitFor('the 21st refused', async () => refused.answered.length === 1);
    expectRateLimited(refused.answered[0]!, /^This credential already holds 20 sync requests/);
    // Another user of the same account holds within the account's share.
    const bob = await identity.tokenHeaders({ user: 'bob', accounts: ['patient'] });
    const bobHeld = await holdMany(bob, 1);
    await waitFor("bob's request held", async () => parts.held.count === 21);
    await publish('patient');
    const answers = await Promise.all([...firstHeld.answers, ...bobHeld.answers]);
    expect(answers.map((res) => res.statusCode)).toEqual(Array(21).fill(200));
  });

  it('a place comes back with every outcome: held again to the full share after answers, ends of waits and 401s', async () => {
    const greedy = await identity.mintKey({ accountId: 'greedy' });
    // Ended by the end of the wait.
    const { syncToken } = await syncToEnd(app, greedy.headers);
    const timedOut = await Promise.all(
      Array.from({ length: 20 }, () => syncRequest(app, greedy.headers, { syncToken, wait: 1 })),
    );
    expect(timedOut.map((res) => res.statusCode)).toEqual(Array(20).fill(200));
    expect(parts.held.holders).toBe(0);
    // Ended by a 401: the key revoked while they are held.
    const revoked = await holdMany(greedy.headers, 20);
    await waitFor('20 held again', async () => parts.held.count === 20);
    const owner = await identity.tokenHeaders({ accounts: ['greedy'] });
    const deleted = await app.inject({
      method: 'DELETE',
      url: `/v3/identity/api-keys/${greedy.id}`,
      headers: owner,
    });
    expect(deleted.statusCode).toBe(204);
    await publish('greedy');
    expect((await Promise.all(revoked.answers)).map((res) => res.statusCode)).toEqual(Array(20).fill(401));
    expect(parts.held.holders).toBe(0);
    // The account's whole share is there for its other keys.
    const others = await Promise.all(
      [1, 2].map(async () => (await identity.mintKey({ accountId: 'greedy' })).headers),
    );
    const again = [await holdMany(others[0]!, 20), await holdMany(others[1]!, 10)];
    await waitFor("the account's share held again", async () => parts.held.count === 30);
    expect(again.flatMap((held) => held.answered)).toEqual([]);
    await publish('greedy');
    for (const res of await Promise.all(again.flatMap((held) => held.answers)))
      expect(res.statusCode).toBe(200);
  });
});
