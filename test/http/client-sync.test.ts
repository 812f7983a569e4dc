import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type CachedAnswer,
  type FollowedPage,
  Playbook,
  PlaybookError,
  type PlaybookOptions,
} from '../../clients/typescript/src/index.js';
import { listenLocally } from '../helpers/app.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { givenAccount } from '../helpers/fixtures.js';
import { publishedResource } from '../helpers/publish-bodies.js';
import { type Item, listed, Mirror, publishResource } from '../helpers/sync-feed.js';
import { sleep } from '../helpers/wait.js';

/**
 * D24 and D27: `client.sync` against the real server, on both stacks. `iterate` walks one sync's
 * pages; `follow` never ends on its own, holds requests with `wait`, resumes from a position, rides out
 * failures with backoff, starts over on 410, and ends on a refusal it cannot mend.
 */

const DAY_MS = 86_400_000;

describe('the client follows the sync feed (D24, D27)', () => {
  let backend: TestBackend;
  let identity: TestIdentity;
  let app: FastifyInstance;
  let baseUrl: string;
  let apiKey: string;
  let writer: Record<string, string>;
  let published = 0;

  beforeAll(async () => {
    backend = await createTestBackend();
    identity = createTestIdentity(backend);
    app = await buildIdentityApp(backend, identity);
    baseUrl = await listenLocally(app);
    await givenAccount(backend.databases.primary, 'acme');
    await givenAccount(backend.databases.primary, 'globex');
    apiKey = (await identity.mintKey({ accountId: 'acme' })).key;
    writer = (await identity.mintKey({ accountId: 'acme', scopes: ['playbook:read', 'playbook:write'] }))
      .headers;
    const made = await app.inject({
      method: 'PUT',
      url: '/v3/playbook/catalogs/org/mine',
      headers: writer,
      payload: {
        name: 'Mine',
        version: '1',
        resources: ['a', 'b', 'c', 'd', 'e'].map((slug) => publishedResource(slug)),
      },
    });
    expect(made.statusCode, made.body).toBe(201);
  });
  afterAll(async () => {
    await app.close();
    await identity.close();
    await backend.cleanup();
  });

  const client = (options: Partial<PlaybookOptions> = {}) => new Playbook({ apiKey, baseUrl, ...options });
  const publish = () => publishResource(app, writer, 'mine', `new-${++published}`);
  const slugsOf = (page: { data: readonly unknown[] }) =>
    (page.data as Item[]).map((item) => item.resource?.slug ?? item.catalog?.slug);

  /** Takes pages from `follow` until `until` holds for one; returns them. */
  async function take(
    pages: AsyncGenerator<FollowedPage>,
    until: (page: FollowedPage) => boolean,
  ): Promise<FollowedPage[]> {
    const taken: FollowedPage[] = [];
    for (;;) {
      const { value, done } = await pages.next();
      if (done) throw new Error('follow ended');
      taken.push(value);
      if (until(value)) return taken;
    }
  }

  it('iterate walks every page of an initial sync, then of what changed since its position', async () => {
    const playbook = client();
    const pages = [];
    for await (const page of playbook.sync.iterate({ pageSize: 2 })) pages.push(page);
    expect(pages.length).toBeGreaterThan(2);
    expect(pages.slice(0, -1).every((page) => page.nextPageToken && !page.nextSyncToken)).toBe(true);
    const last = pages.at(-1)!;
    expect(last.nextSyncToken).toBeDefined();
    const mirror = new Mirror();
    for (const page of pages) mirror.apply(page.data as Item[]);
    const headers = { 'x-api-key': apiKey };
    const lists = await listed(app, headers);
    expect(mirror.catalogs).toEqual(lists.catalogs);
    expect(mirror.resources).toEqual(lists.resources);

    const slug = await publish();
    const changes = [];
    for await (const page of playbook.sync.iterate({ syncToken: last.nextSyncToken! })) changes.push(page);
    expect(changes).toHaveLength(1);
    expect(slugsOf(changes[0]!)).toEqual([slug]);
  });

  it('follow: the initial sync, then each change within a second of it, from a request held meanwhile', async () => {
    const abort = new AbortController();
    const pages = client().sync.follow({ signal: abort.signal, waitSeconds: 20 });
    const initial = await take(pages, (page) => page.nextSyncToken !== undefined);
    expect(initial[0]).toMatchObject({ initial: true, restarted: false });
    expect(initial.flatMap(slugsOf)).toContain('mine');
    // The next page comes from a held request, answered once a change commits.
    const next = pages.next();
    await sleep(300);
    const slug = await publish();
    const committedAt = performance.now();
    const { value } = await next;
    expect(performance.now() - committedAt).toBeLessThan(1000);
    expect(value).toMatchObject({ initial: false, restarted: false });
    expect(slugsOf(value!)).toEqual([slug]);
    // Ended by its signal: the pending request rejects with the signal's reason.
    const pending = pages.next();
    abort.abort();
    await expect(pending).rejects.toMatchObject({ name: 'AbortError' });
  });

  it('follow resumes from a position: only what changed since, never an initial sync', async () => {
    const playbook = client();
    let syncToken: string | undefined;
    for await (const page of playbook.sync.iterate()) syncToken = page.nextSyncToken ?? syncToken;
    const slug = await publish();
    const abort = new AbortController();
    const pages = playbook.sync.follow({ syncToken: syncToken!, signal: abort.signal });
    const [page] = await take(pages, () => true);
    expect(page).toMatchObject({ initial: false, restarted: false });
    expect(slugsOf(page!)).toEqual([slug]);
    expect(page!.nextSyncToken).not.toBe(syncToken);
    abort.abort();
    await pages.return(undefined as never);
  });

  it('follow rides out failures with growing pauses, and goes on from the same position', async () => {
    let failing = 3;
    const errors: unknown[] = [];
    const flaky: typeof fetch = async (input, init) => {
      if (failing-- > 0) throw new TypeError('fetch failed: connection refused');
      return fetch(input, init);
    };
    const playbook = client({ fetch: flaky, maxRetries: 0, retryBaseMs: 20 });
    const abort = new AbortController();
    const pages = playbook.sync.follow({ signal: abort.signal, onError: (error) => errors.push(error) });
    const initial = await take(pages, (page) => page.nextSyncToken !== undefined);
    expect(errors).toHaveLength(3);
    expect(errors.every((error) => error instanceof PlaybookError && error.code === 'network_error')).toBe(
      true,
    );
    expect(initial[0]).toMatchObject({ initial: true });
    abort.abort();
    await pages.return(undefined as never);
  });

  it('follow starts an initial sync over when its position has expired (410), marking its first page', async () => {
    let now = Date.now();
    const later = await buildIdentityApp(backend, identity, undefined, { sync: { now: () => now } });
    try {
      const playbook = new Playbook({ apiKey, baseUrl: await listenLocally(later), maxRetries: 0 });
      let syncToken: string | undefined;
      for await (const page of playbook.sync.iterate()) syncToken = page.nextSyncToken ?? syncToken;
      await publish();
      now = Date.now() + 31 * DAY_MS;
      const errors: unknown[] = [];
      const abort = new AbortController();
      const pages = playbook.sync.follow({
        syncToken: syncToken!,
        signal: abort.signal,
        onError: (error) => errors.push(error),
      });
      const again = await take(pages, (page) => page.nextSyncToken !== undefined);
      expect(errors).toEqual([expect.objectContaining({ status: 410, code: 'sync_token_expired' })]);
      expect(again[0]).toMatchObject({ initial: true, restarted: true });
      expect(again.slice(1).every((page) => !page.restarted)).toBe(true);
      expect(again.flatMap(slugsOf)).toContain('mine');
      abort.abort();
      await pages.return(undefined as never);
    } finally {
      await later.close();
    }
  });

  it("follow ends with the refusal when the position is not the caller's (400 invalid_sync_token)", async () => {
    let syncToken: string | undefined;
    for await (const page of client().sync.iterate()) syncToken = page.nextSyncToken ?? syncToken;
    const globex = (await identity.mintKey({ accountId: 'globex' })).key;
    const pages = new Playbook({ apiKey: globex, baseUrl }).sync.follow({ syncToken: syncToken! });
    await expect(pages.next()).rejects.toMatchObject({ status: 400, code: 'invalid_sync_token' });
  });

  it('keeps no sync page in the cache: each is asked once', async () => {
    const kept = new Map<string, CachedAnswer>();
    const playbook = client({
      cache: { get: (key) => kept.get(key), set: (key, answer) => void kept.set(key, answer) },
    });
    for await (const page of playbook.sync.iterate()) expect(page.data).toBeDefined();
    expect([...kept.keys()].filter((key) => key.includes('/sync'))).toEqual([]);
  });
});
