import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { ApiKeyLookup } from '../../src/auth/api-key-verifier.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { givenAccount } from '../helpers/fixtures.js';
import { expectNothingHeld, heldRefusals, type SyncParts } from '../helpers/sync.js';
import { type Page, publishCatalog, publishResource, syncRequest, syncToEnd } from '../helpers/sync-feed.js';
import { waitFor } from '../helpers/wait.js';

/**
 * D27 on both stacks: before a held sync request answers, woken by a change or at the end of its
 * wait, its credential is checked again. A key revoked, rolled past its overlap or expired meanwhile,
 * or an access token expired meanwhile, gets the 401 a new request with it gets, never the change;
 * and the check is answered from memory, not by a storage read per held request.
 */

const MINUTE_MS = 60_000;

describe('a held sync request answers only while its credential is accepted (D27)', () => {
  let backend: TestBackend;
  let identity: TestIdentity;
  let app: FastifyInstance;
  let parts: SyncParts;
  let writer: Record<string, string>;
  let owner: Record<string, string>;
  /** The identity's clock: keys and tokens expire by it. */
  let now = Date.now();
  /** Storage reads of each API key by the verifier. */
  const reads = new Map<string, number>();
  let published = 0;

  const publish = () => publishResource(app, writer, 'mine', `r${++published}`);

  /** One request held at `headers`' current position; resolves with its answer. */
  const holdOne = async (headers: Record<string, string>, wait = 30) => {
    const { syncToken } = await syncToEnd(app, headers);
    const held = parts.held.count;
    const answer = syncRequest(app, headers, { syncToken, wait }) as Promise<LightMyRequestResponse>;
    await waitFor('the request held', async () => parts.held.count === held + 1);
    return { answer, syncToken };
  };

  /** The 401 a new request with `headers` gets now, for the held one's to be compared with. */
  const refusedNow = async (headers: Record<string, string>, syncToken: string) => {
    const res = await syncRequest(app, headers, { syncToken });
    expect(res.statusCode).toBe(401);
    return res;
  };

  const expectSameRefusal = (held: LightMyRequestResponse, fresh: LightMyRequestResponse, detail: string) => {
    expect(held.statusCode, held.body).toBe(401);
    expect(held.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(held.headers['www-authenticate']).toEqual(fresh.headers['www-authenticate']);
    const { requestId: _held, ...problem } = held.json();
    const { requestId: _fresh, ...expected } = fresh.json();
    expect(problem).toEqual(expected);
    expect(problem).toMatchObject({ code: 'unauthenticated', detail });
    // Nothing of what changed.
    expect(held.body).not.toMatch(/"resource"|nextSyncToken/);
  };

  const revoke = async (keyId: string) => {
    const res = await app.inject({ method: 'DELETE', url: `/v3/identity/api-keys/${keyId}`, headers: owner });
    expect(res.statusCode).toBe(204);
  };

  const roll = async (keyId: string, overlapSeconds: number) => {
    const res = await app.inject({
      method: 'POST',
      url: `/v3/identity/api-keys/${keyId}/roll`,
      headers: owner,
      payload: { overlapSeconds },
    });
    expect(res.statusCode, res.body).toBe(201);
  };

  const refusals = () => heldRefusals(identity.metrics, 'unauthenticated');

  beforeAll(async () => {
    backend = await createTestBackend();
    identity = createTestIdentity(backend, {
      options: {
        now: () => now,
        keyLookup: (lookup: ApiKeyLookup) => ({
          find: (keyId) => {
            reads.set(keyId, (reads.get(keyId) ?? 0) + 1);
            return lookup.find(keyId);
          },
        }),
      },
    });
    app = await buildIdentityApp(backend, identity, undefined, {
      sync: { built: (built) => (parts = built) },
    });
    await givenAccount(backend.databases.primary, 'acme');
    writer = (await identity.mintKey({ accountId: 'acme', scopes: ['playbook:read', 'playbook:write'] }))
      .headers;
    owner = await identity.tokenHeaders({ accounts: ['acme'], ttlSeconds: 86_400 });
    await publishCatalog(app, writer, 'mine');
  });
  afterEach(() => expectNothingHeld(parts.held));
  afterAll(async () => {
    await app.close();
    await identity.close();
    await backend.cleanup();
  });

  it('a key revoked while its request is held gets 401 when a change wakes it, never the change', async () => {
    const key = await identity.mintKey({ accountId: 'acme' });
    const before = await refusals();
    const { answer, syncToken } = await holdOne(key.headers);
    await revoke(key.id);
    await publish();
    expectSameRefusal(await answer, await refusedNow(key.headers, syncToken), 'the API key has been revoked');
    expect(await refusals()).toBe(before + 1);
  });

  it('a key revoked while its request is held gets 401 when its wait runs out', async () => {
    const key = await identity.mintKey({ accountId: 'acme' });
    const { answer, syncToken } = await holdOne(key.headers, 1);
    await revoke(key.id);
    expectSameRefusal(await answer, await refusedNow(key.headers, syncToken), 'the API key has been revoked');
  });

  it('a key that expires while its request is held gets 401, when woken and when its wait runs out', async () => {
    const expiresAt = new Date(now + 2 * MINUTE_MS).toISOString();
    const key = await identity.mintKey({ accountId: 'acme', expiresAt });
    const woken = await holdOne(key.headers);
    const ending = await holdOne(key.headers, 1);
    now += 3 * MINUTE_MS;
    await publish();
    const fresh = await refusedNow(key.headers, woken.syncToken);
    expectSameRefusal(await woken.answer, fresh, 'the API key has expired');
    expectSameRefusal(await ending.answer, fresh, 'the API key has expired');
  });

  it('a key rolled with an overlap: within it a held request answers the change; past it, 401', async () => {
    const key = await identity.mintKey({ accountId: 'acme' });
    const within = await holdOne(key.headers);
    await roll(key.id, 60);
    const slug = await publish();
    const answered = await within.answer;
    expect(answered.statusCode, answered.body).toBe(200);
    expect((answered.json() as Page).data.map((item) => item.resource?.slug)).toEqual([slug]);

    const past = await holdOne(key.headers);
    now += 2 * MINUTE_MS;
    await publish();
    expectSameRefusal(
      await past.answer,
      await refusedNow(key.headers, past.syncToken),
      'the API key has expired',
    );
  });

  it('a key rolled with no overlap while its request is held gets 401', async () => {
    const key = await identity.mintKey({ accountId: 'acme' });
    const { answer, syncToken } = await holdOne(key.headers);
    await roll(key.id, 0);
    await publish();
    expectSameRefusal(await answer, await refusedNow(key.headers, syncToken), 'the API key has expired');
  });

  it('an access token that expires while its request is held gets 401', async () => {
    const token = await identity.tokenHeaders({ user: 'ann', accounts: ['acme'], ttlSeconds: 120 });
    const woken = await holdOne(token);
    const ending = await holdOne(token, 1);
    now += 3 * MINUTE_MS;
    await publish();
    const fresh = await refusedNow(token, woken.syncToken);
    expectSameRefusal(await woken.answer, fresh, 'the access token has expired');
    expectSameRefusal(await ending.answer, fresh, 'the access token has expired');
    // A live token's held request answers the change as before.
    const live = await identity.tokenHeaders({ user: 'ann', accounts: ['acme'] });
    const held = await holdOne(live);
    const slug = await publish();
    const answered = await held.answer;
    expect(answered.statusCode, answered.body).toBe(200);
    expect((answered.json() as Page).data.map((item) => item.resource?.slug)).toEqual([slug]);
  });

  it('twenty requests of one key woken by one change check it from memory: no storage read', async () => {
    const key = await identity.mintKey({ accountId: 'acme' });
    const { syncToken } = await syncToEnd(app, key.headers);
    const answers = Array.from({ length: 20 }, () => syncRequest(app, key.headers, { syncToken, wait: 30 }));
    await waitFor('20 held', async () => parts.held.count === 20);
    // Past the verifier's one second of freshness, as a held request usually is.
    now += 5000;
    const before = reads.get(key.id) ?? 0;
    await publish();
    expect((await Promise.all(answers)).map((res) => res.statusCode)).toEqual(Array(20).fill(200));
    expect(reads.get(key.id) ?? 0).toBe(before);
  });

  it('twenty requests of a key whose entry a roll dropped read it once together', async () => {
    const key = await identity.mintKey({ accountId: 'acme' });
    const { syncToken } = await syncToEnd(app, key.headers);
    const answers = Array.from({ length: 20 }, () => syncRequest(app, key.headers, { syncToken, wait: 30 }));
    await waitFor('20 held', async () => parts.held.count === 20);
    await roll(key.id, 3600);
    const before = reads.get(key.id) ?? 0;
    await publish();
    expect((await Promise.all(answers)).map((res) => res.statusCode)).toEqual(Array(20).fill(200));
    expect(reads.get(key.id) ?? 0).toBe(before + 1);
  });
});
