import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type CachedAnswer,
  Playbook,
  PlaybookError,
  type PlaybookOptions,
  parseApiKey,
  type ResponseInfo,
  signInForDevelopment,
} from '../../clients/typescript/src/index.js';
import {
  composeApiKey,
  generateApiKey,
  parseApiKey as serverParse,
} from '../../src/schemas/api-key-format.js';
import { listenLocally } from '../helpers/app.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { givenAccount, givenCatalog, givenResource } from '../helpers/fixtures.js';
import { AUDIENCE, ISSUER, JwksServer, sign, signingKey } from '../helpers/jwks.js';
import { sleep } from '../helpers/wait.js';

/**
 * D24: the client library against the real server, on both stacks: every operation, pages walked to
 * the end, retries, revalidation, timeouts and aborts, and its one error class.
 */

/** Node's fetch, counting what it sends; `before` can stand in for an answer (an outage on the way). */
function countingFetch(before?: (call: number) => Response | Error | undefined) {
  const counted = { calls: 0, methods: [] as string[] };
  const wrapped: typeof fetch = async (input, init) => {
    counted.calls++;
    counted.methods.push(init?.method ?? 'GET');
    const instead = before?.(counted.calls);
    if (instead instanceof Error) throw instead;
    if (instead) return instead;
    return fetch(input, init);
  };
  return Object.assign(counted, { fetch: wrapped });
}

const unavailable = () =>
  new Response(
    JSON.stringify({
      type: '/docs/problems/unavailable',
      title: 'Service unavailable',
      status: 503,
      code: 'unavailable',
      detail: 'A backend of the service is unavailable; retry with backoff.',
      requestId: 'outage-1',
    }),
    { status: 503, headers: { 'content-type': 'application/problem+json', 'x-request-id': 'outage-1' } },
  );

describe('the TypeScript client (D24)', () => {
  let backend: TestBackend;
  let identity: TestIdentity;
  let app: FastifyInstance;
  let baseUrl: string;
  let apiKey: string;
  let accessToken: string;
  const resources: { id: string; slug: string; versionIds: string[] }[] = [];

  beforeAll(async () => {
    backend = await createTestBackend();
    identity = createTestIdentity(backend);
    app = await buildIdentityApp(backend, identity);
    baseUrl = await listenLocally(app);
    const db = backend.databases.primary;
    await givenAccount(db, 'acme', 'pro');
    const handbook = await givenCatalog(db, { slug: 'handbook' });
    await givenCatalog(db, { slug: 'guides' });
    await givenCatalog(db, { slug: 'runbooks', accountId: 'acme' });
    for (const slug of ['alpha', 'bravo', 'charlie', 'delta', 'echo']) {
      const resource = await givenResource(backend, handbook, {
        slug,
        versions: [
          { version: '1.0.0', content: `# ${slug} one\n` },
          { version: '1.1.0', content: `# ${slug} two\n` },
          { version: '2.0.0', content: `# ${slug} three\n` },
        ],
      });
      resources.push(resource);
    }
    apiKey = (await identity.mintKey({ accountId: 'acme' })).key;
    accessToken = await identity.mintToken({ user: 'ada', accounts: ['acme'] });
  });
  afterAll(async () => {
    await app.close();
    await identity.close();
    await backend.cleanup();
  });

  const client = (options: Partial<PlaybookOptions> = {}) =>
    new Playbook({ apiKey, baseUrl, retryBaseMs: 10, ...options } as PlaybookOptions);

  describe('every read, pages walked to the end', () => {
    it('lists and iterates Catalogs', async () => {
      const playbook = client();
      const first = await playbook.catalogs.list({ pageSize: 2 });
      expect(first.meta).toMatchObject({ page: 1, pageSize: 2, total: 3, pageCount: 2 });
      expect(first.data).toHaveLength(2);
      const all: string[] = [];
      for await (const catalog of playbook.catalogs.iterate({ pageSize: 1 })) all.push(catalog.slug);
      expect(all.sort()).toEqual(['guides', 'handbook', 'runbooks']);
    });

    it('lists and iterates a Catalog of each owner, gets a Resource, its versions, and a version with content', async () => {
      const playbook = client();
      const page = await playbook.resources.list('svc', 'handbook', { pageSize: 2 });
      expect(page.meta).toMatchObject({ total: 5, pageCount: 3 });
      const slugs: string[] = [];
      for await (const item of playbook.resources.iterate('svc', 'handbook', { pageSize: 2 }))
        slugs.push(item.slug);
      expect(slugs).toEqual(['alpha', 'bravo', 'charlie', 'delta', 'echo']);
      expect((await playbook.resources.list('org', 'runbooks')).data).toEqual([]);

      const [alpha] = resources;
      const resource = await playbook.resources.get(alpha!.id);
      expect(resource).toMatchObject({ id: alpha!.id, slug: 'alpha' });
      const versions = await playbook.resources.versions(alpha!.id, { pageSize: 2 });
      expect(versions.meta.total).toBe(3);
      const labels: string[] = [];
      for await (const version of playbook.resources.iterateVersions(alpha!.id, { pageSize: 1 })) {
        labels.push(version.version);
      }
      expect(labels.sort()).toEqual(['1.0.0', '1.1.0', '2.0.0']);
      const detail = await playbook.versions.get(alpha!.id, alpha!.versionIds[0]!);
      expect(detail).toMatchObject({ id: alpha!.versionIds[0], version: '1.0.0', content: '# alpha one\n' });
    });
  });

  describe('reads by human ref (D29)', () => {
    it('gets a Catalog and a Resource by their refs: the same answers as the list and the read by id', async () => {
      const playbook = client();
      const handbook = await playbook.catalogs.get('svc', 'handbook');
      const listed = (await playbook.catalogs.list()).data.find((catalog) => catalog.slug === 'handbook');
      expect(handbook).toEqual(listed);
      expect((await playbook.catalogs.get('org', 'runbooks')).humanRef).toBe('org/runbooks');
      const [alpha] = resources;
      const byRef = await playbook.resources.getByRef('svc', 'handbook', 'alpha');
      expect(byRef).toEqual(await playbook.resources.get(alpha!.id));
      expect(byRef.humanRef).toBe('svc/handbook/alpha');
    });

    it('raises 404 for a ref that names nothing visible, and 400 naming a malformed part', async () => {
      const playbook = client();
      await expect(playbook.catalogs.get('org', 'handbook')).rejects.toMatchObject({
        status: 404,
        code: 'not_found',
      });
      await expect(playbook.resources.getByRef('svc', 'handbook', 'zulu')).rejects.toMatchObject({
        status: 404,
      });
      const invalid = (await playbook.resources
        .getByRef('svc', 'handbook', 'Not A Slug')
        .catch((e: unknown) => e)) as PlaybookError;
      expect(invalid).toMatchObject({ status: 400, code: 'invalid_request' });
      expect(invalid.errors).toEqual([expect.objectContaining({ in: 'path', name: 'resourceSlug' })]);
    });
  });

  describe('key management with an access token', () => {
    it('creates, lists, iterates, rolls and revokes keys; each new key works at once', async () => {
      const manager = new Playbook({ accessToken, baseUrl, accountId: 'acme' });
      const created = await manager.apiKeys.create({
        name: 'ci',
        accountId: 'acme',
        scopes: ['playbook:read'],
      });
      expect(parseApiKey(created.key)).toEqual({
        environment: 'test',
        keyId: created.id,
        checksumValid: true,
      });
      expect((await client({ apiKey: created.key }).catalogs.list()).meta.total).toBe(3);

      const listed = await manager.apiKeys.list({ accountId: 'acme', pageSize: 100 });
      expect(listed.data.map((key) => key.id)).toContain(created.id);
      const ids: string[] = [];
      for await (const key of manager.apiKeys.iterate({ accountId: 'acme', pageSize: 1 })) ids.push(key.id);
      expect(ids).toEqual(listed.data.map((key) => key.id));

      const rolled = await manager.apiKeys.roll(created.id, { overlapSeconds: 0 });
      expect(rolled).toMatchObject({ name: 'ci', accountId: 'acme', scopes: ['playbook:read'] });
      expect((await client({ apiKey: rolled.key }).catalogs.list()).meta.total).toBe(3);
      const old = await client({ apiKey: created.key, maxRetries: 0 })
        .catalogs.list()
        .catch((e: unknown) => e);
      expect(old).toBeInstanceOf(PlaybookError);
      expect(old).toMatchObject({ status: 401, code: 'unauthenticated', detail: 'the API key has expired' });

      await manager.apiKeys.revoke(rolled.id);
      await manager.apiKeys.revoke(rolled.id);
      const refused = (await client({ apiKey: rolled.key })
        .catalogs.list()
        .catch((e: unknown) => e)) as PlaybookError;
      expect(refused).toMatchObject({ status: 401, code: 'unauthenticated', title: 'Unauthenticated' });
      expect(refused.requestId).toMatch(/^[0-9a-f-]{36}$/);
      expect(refused.message).toContain(refused.requestId);
      expect(refused.message).not.toContain(rolled.key);
      expect(refused.message).not.toContain(rolled.key.split('_')[4]);
    });
  });

  describe('the signed-in user and the development sign-in (D33)', () => {
    it('me() names the user and the accounts of the token, with their plans', async () => {
      const manager = new Playbook({ accessToken, baseUrl });
      expect(await manager.me()).toMatchObject({
        user: { id: 'ada' },
        accounts: [{ id: 'acme', plan: 'pro' }],
      });
      await expect(client().me()).rejects.toMatchObject({ status: 401, code: 'unauthenticated' });
    });

    it('signInForDevelopment gets a token the client then uses, sent once and never retried', async () => {
      const counted = countingFetch();
      const token = await signInForDevelopment(
        { baseUrl, fetch: counted.fetch },
        { user: 'bo', accounts: ['acme', 'beta'], ttlSeconds: 120 },
      );
      expect(token.tokenType).toBe('Bearer');
      expect(Date.parse(token.expiresAt) - Date.now()).toBeLessThanOrEqual(120_000);
      const me = await new Playbook({ accessToken: token.accessToken, baseUrl }).me();
      expect(me.user.id).toBe('bo');
      expect(me.accounts.map((account) => account.id)).toEqual(['acme', 'beta']);

      const failing = countingFetch(() => unavailable());
      await expect(
        signInForDevelopment({ baseUrl, fetch: failing.fetch }, { user: 'bo', accounts: ['acme'] }),
      ).rejects.toMatchObject({ status: 503, requestId: 'outage-1' });
      expect(failing.calls).toBe(1);
      await expect(signInForDevelopment({ baseUrl }, { user: 'bo', accounts: [] })).rejects.toMatchObject({
        status: 400,
        errors: [expect.objectContaining({ name: 'accounts' })],
      });
    });

    it('signInForDevelopment keeps to the rules of a base URL: no plain http to a host that is not loopback', async () => {
      await expect(
        signInForDevelopment({ baseUrl: 'http://playbook.example.test' }, { user: 'bo', accounts: ['acme'] }),
      ).rejects.toThrow(TypeError);
    });
  });

  describe('publishing and the audit trail (D23)', () => {
    it('puts a Catalog (dry run first), a Resource, a version, archives both, with ETags and If-Match', async () => {
      // An account of its own, so that the reads around keep counting three Catalogs.
      await givenAccount(backend.databases.primary, 'pubco');
      const { key } = await identity.mintKey({
        accountId: 'pubco',
        scopes: ['playbook:read', 'playbook:write'],
      });
      const publisher = client({ apiKey: key });
      const input = {
        name: 'Client handbook',
        version: '1',
        resources: [
          {
            slug: 'one',
            kind: 'document' as const,
            title: 'One',
            version: '1',
            mediaType: 'text/markdown',
            content: '# one',
          },
        ],
      };
      const dry = await publisher.catalogs.put('client-made', input, { dryRun: true });
      expect(dry.data).toMatchObject({ dryRun: true, changes: { created: 1 } });
      expect(dry.etag).toBeUndefined();
      const made = await publisher.catalogs.put('client-made', input, { createOnly: true });
      expect(made.data.catalog).toMatchObject({ slug: 'client-made', owner: 'org' });
      expect(made.etag).toMatch(/^"c/);
      const again = await publisher.catalogs
        .put('client-made', input, { createOnly: true })
        .catch((e: unknown) => e);
      expect(again).toMatchObject({ status: 412, code: 'precondition_failed' });
      const renamed = await publisher.catalogs.put(
        'client-made',
        { ...input, name: 'Renamed' },
        { ifMatch: made.etag! },
      );
      expect(renamed.etag).not.toBe(made.etag);
      const stale = await publisher.catalogs
        .put('client-made', input, { ifMatch: made.etag! })
        .catch((e: unknown) => e);
      expect(stale).toMatchObject({ status: 412 });

      const two = await publisher.resources.put('client-made', 'two', {
        kind: 'document',
        title: 'Two',
        version: '1',
        mediaType: 'text/markdown',
        content: '# two',
      });
      expect(two.data.resource.slug).toBe('two');
      const version = await publisher.catalogs.publishVersion('client-made', '2');
      expect(version.data.currentVersion).toMatchObject({ version: '2', resourceCount: 2 });
      await publisher.resources.archive('client-made', 'two');
      await publisher.catalogs.archive('client-made');
      await publisher.catalogs.archive('client-made');

      const manager = new Playbook({
        accessToken: await identity.mintToken({ user: 'ada', accounts: ['pubco'] }),
        baseUrl,
      });
      const actions: string[] = [];
      for await (const event of manager.auditEvents.iterate({ accountId: 'pubco', pageSize: 2 }))
        actions.push(event.action);
      expect(actions.slice(0, 5)).toEqual([
        'catalog.archived',
        'resource.archived',
        'catalog.version_published',
        'resource.created',
        'catalog.updated',
      ]);
      // D33: the filters go as the API takes them, a list of actions comma-separated.
      const archived = await manager.auditEvents.list({
        accountId: 'pubco',
        action: ['catalog.archived', 'resource.archived'],
        actor: 'pubco-writer',
      });
      expect(archived.data).toEqual([]);
      const filtered: string[] = [];
      for await (const event of manager.auditEvents.iterate({
        accountId: 'pubco',
        action: ['catalog.archived', 'resource.archived'],
        from: '2000-01-01T00:00:00Z',
        pageSize: 1,
      }))
        filtered.push(event.action);
      expect(filtered).toEqual(['catalog.archived', 'resource.archived']);
      await expect(
        manager.auditEvents.list({
          accountId: 'pubco',
          from: '2030-01-01T00:00:00Z',
          to: '2020-01-01T00:00:00Z',
        }),
      ).rejects.toMatchObject({ status: 400, errors: [expect.objectContaining({ name: 'to' })] });
    });
  });

  describe('errors and retries', () => {
    it('raises the problem document as a PlaybookError, and never retries a 400, 403 or 404', async () => {
      const counted = countingFetch();
      const playbook = client({ fetch: counted.fetch });
      const invalid = (await playbook.catalogs
        .list({ pageSize: 1000 })
        .catch((e: unknown) => e)) as PlaybookError;
      expect(invalid).toBeInstanceOf(PlaybookError);
      expect(invalid).toMatchObject({ status: 400, code: 'invalid_request', title: 'Invalid request' });
      expect(invalid.errors).toEqual([expect.objectContaining({ in: 'query', name: 'pageSize' })]);
      expect(invalid.message).toContain('query pageSize');
      const missing = await playbook.resources
        .get('0190f0c8-0000-7000-8000-000000000000')
        .catch((e: unknown) => e);
      expect(missing).toMatchObject({ status: 404, code: 'not_found' });
      const forbidden = await client({ accountId: 'globex', fetch: counted.fetch })
        .catalogs.list()
        .catch((e: unknown) => e);
      expect(forbidden).toMatchObject({ status: 403 });
      expect(counted.calls).toBe(3);
    });

    it('retries a 503 and a lost connection of a read on the way, with backoff, and then answers', async () => {
      const counted = countingFetch((call) =>
        call === 1 ? unavailable() : call === 2 ? new TypeError('fetch failed') : undefined,
      );
      const infos: ResponseInfo[] = [];
      const playbook = client({ fetch: counted.fetch, onResponse: (info) => infos.push(info) });
      expect((await playbook.catalogs.list()).meta.total).toBe(3);
      expect(counted.calls).toBe(3);
      expect(infos).toEqual([
        expect.objectContaining({ operation: 'listPlaybookCatalogs', status: 200, attempts: 3 }),
      ]);
    });

    it('gives up after maxRetries with the last problem, its request id and all', async () => {
      const counted = countingFetch(() => unavailable());
      const failed = await client({ fetch: counted.fetch, maxRetries: 2 })
        .catalogs.list()
        .catch((e: unknown) => e);
      expect(failed).toMatchObject({ status: 503, code: 'unavailable', requestId: 'outage-1' });
      expect(counted.calls).toBe(3);
    });

    it('never sends a key creation twice after a 5xx or a lost connection, whose outcome is unknown', async () => {
      for (const failure of [unavailable, () => new TypeError('fetch failed')]) {
        const counted = countingFetch(() => failure());
        const manager = new Playbook({ accessToken, baseUrl, fetch: counted.fetch });
        const failed = await manager.apiKeys
          .create({ name: 'once', accountId: 'acme', scopes: ['playbook:read'] })
          .catch((e: unknown) => e);
        expect(failed).toBeInstanceOf(PlaybookError);
        expect(counted.calls).toBe(1);
      }
      const lost = await new Playbook({
        accessToken,
        baseUrl,
        fetch: countingFetch(() => new TypeError('fetch failed')).fetch,
      }).apiKeys
        .create({ name: 'once', accountId: 'acme', scopes: ['playbook:read'] })
        .catch((e: unknown) => e);
      expect(lost).toMatchObject({ status: 0, code: 'network_error' });
    });
  });

  describe('503 from the real server', () => {
    const jwks = new JwksServer();
    let remote: FastifyInstance;
    let remoteIdentity: TestIdentity;
    let remoteUrl: string;

    beforeAll(async () => {
      const url = await jwks.start();
      remoteIdentity = createTestIdentity(backend, {
        env: { PLAYBOOK_JWKS_URL: url, PLAYBOOK_JWT_ISSUER: ISSUER, PLAYBOOK_JWT_AUDIENCE: AUDIENCE },
        options: { jwks: { cooldownDuration: 0 } },
      });
      remote = await buildIdentityApp(backend, remoteIdentity);
      remoteUrl = await listenLocally(remote);
    });
    afterAll(async () => {
      await remote.close();
      await remoteIdentity.close();
      await jwks.stop();
    });

    it('retries while the identity provider fails (the service answers 503), then answers', async () => {
      const key = await signingKey('client-1', 'ES256');
      jwks.keys = [key.publicJwk];
      jwks.failures = 2;
      const token = await sign(key, { sub: 'ada', accounts: ['acme'] });
      const counted = countingFetch();
      const infos: ResponseInfo[] = [];
      const playbook = new Playbook({
        accessToken: token,
        baseUrl: remoteUrl,
        retryBaseMs: 10,
        fetch: counted.fetch,
        onResponse: (info) => infos.push(info),
      });
      const once = new Playbook({ accessToken: token, baseUrl: remoteUrl, maxRetries: 0 });
      jwks.failures = 1;
      const refused = await once.catalogs.list().catch((e: unknown) => e);
      expect(refused).toMatchObject({ status: 503, code: 'unavailable' });
      jwks.failures = 2;
      expect((await playbook.catalogs.list()).meta.total).toBe(3);
      expect(counted.calls).toBe(3);
      expect(infos).toEqual([expect.objectContaining({ status: 200, attempts: 3 })]);
    });
  });

  describe('429 from the real rate limit', () => {
    let limited: FastifyInstance;
    let limitedIdentity: TestIdentity;
    let limitedUrl: string;

    beforeAll(async () => {
      limitedIdentity = createTestIdentity(backend, {
        env: { PLAYBOOK_RATE_LIMIT_MAX: '2', PLAYBOOK_RATE_LIMIT_WINDOW_MS: '1000' },
      });
      limited = await buildIdentityApp(backend, limitedIdentity);
      limitedUrl = await listenLocally(limited);
    });
    afterAll(async () => {
      await limited.close();
      await limitedIdentity.close();
    });

    it('waits for Retry-After and succeeds; with retries off, raises it with retryAfter', async () => {
      const { key } = await limitedIdentity.mintKey({ accountId: 'acme' });
      const counted = countingFetch();
      const infos: ResponseInfo[] = [];
      const playbook = new Playbook({
        apiKey: key,
        baseUrl: limitedUrl,
        fetch: counted.fetch,
        onResponse: (i) => infos.push(i),
      });
      const once = new Playbook({ apiKey: key, baseUrl: limitedUrl, maxRetries: 0 });
      await playbook.catalogs.list();
      await playbook.catalogs.list();
      const refused = (await once.catalogs.list().catch((e: unknown) => e)) as PlaybookError;
      expect(refused).toMatchObject({ status: 429, code: 'rate_limited' });
      expect(refused.retryAfter).toBeGreaterThanOrEqual(1);

      const started = performance.now();
      expect((await playbook.catalogs.list()).meta.total).toBe(3);
      // The 429 was answered, then the wait the service asked for, then the answer.
      expect(counted.calls).toBe(4);
      expect(performance.now() - started).toBeGreaterThanOrEqual(500);
      expect(infos.at(-1)).toMatchObject({ status: 200, attempts: 2 });
      expect(infos.at(-1)?.rateLimit).toMatchObject({ limit: 2 });
    });
  });

  describe('revalidation', () => {
    it('sends If-None-Match from its cache and serves the cached body of a 304', async () => {
      const infos: ResponseInfo[] = [];
      const counted = countingFetch();
      const playbook = client({ cache: true, fetch: counted.fetch, onResponse: (info) => infos.push(info) });
      const first = await playbook.resources.get(resources[1]!.id);
      const second = await playbook.resources.get(resources[1]!.id);
      expect(second).toEqual(first);
      expect(infos.map((info) => [info.status, info.fromCache])).toEqual([
        [200, false],
        [304, true],
      ]);
      expect(infos[0]!.etag).toMatch(/^"/);
      expect(counted.calls).toBe(2);
      // Another account's view never comes from this caller's entries.
      const other = new Playbook({
        accessToken,
        baseUrl,
        cache: true,
        onResponse: (info) => infos.push(info),
      });
      await other.resources.get(resources[1]!.id);
      expect(infos.at(-1)).toMatchObject({ status: 200, fromCache: false });
    });
  });

  describe('timeouts and aborts', () => {
    let silent: http.Server;
    let silentUrl: string;
    let connections = 0;
    /** What a test does as the silent peer takes a request. */
    let taken = () => {};

    beforeAll(async () => {
      // A peer that accepts requests and never answers them.
      silent = http.createServer(() => {
        connections++;
        taken();
      });
      await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
      silentUrl = `http://127.0.0.1:${(silent.address() as AddressInfo).port}`;
    });
    afterAll(async () => {
      silent.closeAllConnections();
      await new Promise((resolve) => silent.close(resolve));
    });

    it('abandons an attempt after timeoutMs, retries a read, then raises timeout', async () => {
      connections = 0;
      const playbook = new Playbook({
        apiKey,
        baseUrl: silentUrl,
        timeoutMs: 150,
        maxRetries: 1,
        retryBaseMs: 10,
      });
      const started = performance.now();
      const failed = await playbook.catalogs.list().catch((e: unknown) => e);
      expect(failed).toMatchObject({ status: 0, code: 'timeout', detail: 'no answer within 150 ms' });
      expect(performance.now() - started).toBeGreaterThanOrEqual(290);
      expect(connections).toBe(2);
    });

    it('an abort ends a request at once as an AbortError, and the call is not retried', async () => {
      connections = 0;
      const playbook = new Playbook({ apiKey, baseUrl: silentUrl, timeoutMs: 10_000, retryBaseMs: 10 });
      const controller = new AbortController();
      // Aborted once the peer holds the request: a timer could fire before the request got there.
      taken = () => controller.abort();
      const started = performance.now();
      const aborted = await playbook.resources
        .getByRef('svc', 'handbook', 'alpha', { signal: controller.signal })
        .catch((e: unknown) => e)
        .finally(() => {
          taken = () => {};
        });
      expect(aborted).toMatchObject({ name: 'AbortError' });
      expect(aborted).not.toBeInstanceOf(PlaybookError);
      expect(performance.now() - started).toBeLessThan(2_000);
      await sleep(200);
      expect(connections).toBe(1);
    });

    it('an abort ends a wait between retries at once, however long the service asked to wait', async () => {
      const counted = countingFetch(() => {
        const answer = unavailable();
        answer.headers.set('retry-after', '10');
        return answer;
      });
      const controller = new AbortController();
      const playbook = client({ fetch: counted.fetch, maxRetries: 5 });
      setTimeout(() => controller.abort(), 100);
      const started = performance.now();
      const aborted = await playbook.catalogs
        .get('svc', 'handbook', { signal: controller.signal })
        .catch((e: unknown) => e);
      expect(aborted).toMatchObject({ name: 'AbortError' });
      expect(performance.now() - started).toBeLessThan(2_000);
      expect(counted.calls).toBe(1);
    });

    it("honours the caller's signal: rejects with its reason, and sends nothing more", async () => {
      connections = 0;
      const playbook = new Playbook({ apiKey, baseUrl: silentUrl, timeoutMs: 10_000 });
      const controller = new AbortController();
      setTimeout(() => controller.abort(new Error('stopped by the caller')), 100);
      await expect(playbook.catalogs.list({}, { signal: controller.signal })).rejects.toThrow(
        'stopped by the caller',
      );
      const before = connections;
      await sleep(200);
      expect(connections).toBe(before);
      const aborted = AbortSignal.abort(new Error('never started'));
      const counted = countingFetch();
      await expect(client({ fetch: counted.fetch }).catalogs.list({}, { signal: aborted })).rejects.toThrow(
        'never started',
      );
      expect(counted.calls).toBe(0);
    });
  });

  describe("a call's own headers (D29)", () => {
    /** Node's fetch, keeping the headers of each request it sends. */
    function recordingFetch() {
      const sent: Headers[] = [];
      const wrapped: typeof fetch = async (input, init) => {
        sent.push(new Headers(init?.headers));
        return fetch(input, init);
      };
      return { sent, fetch: wrapped };
    }

    it('sends them with the call: the service echoes its x-request-id, and user-agent may be replaced', async () => {
      const recorded = recordingFetch();
      const infos: ResponseInfo[] = [];
      const playbook = client({ fetch: recorded.fetch, onResponse: (info) => infos.push(info) });
      await playbook.resources.getByRef('svc', 'handbook', 'alpha', {
        headers: { 'X-Request-Id': 'mirror-run-7', 'user-agent': 'mirror/2.0', traceparent: 'tp-1' },
      });
      expect(infos[0]).toMatchObject({ status: 200, requestId: 'mirror-run-7' });
      const [headers] = recorded.sent;
      expect(headers!.get('user-agent')).toBe('mirror/2.0');
      expect(headers!.get('traceparent')).toBe('tp-1');
      expect(headers!.get('x-api-key')).toBe(apiKey);
      // The next call sends none of them.
      await playbook.catalogs.list();
      expect(recorded.sent[1]!.get('traceparent')).toBeNull();
      expect(recorded.sent[1]!.get('user-agent')).toMatch(/^playbook-client\//);
    });

    it('sends them on every method: a key manager call with a token too', async () => {
      const recorded = recordingFetch();
      const infos: ResponseInfo[] = [];
      const manager = new Playbook({
        accessToken,
        baseUrl,
        accountId: 'acme',
        fetch: recorded.fetch,
        onResponse: (info) => infos.push(info),
      });
      await manager.apiKeys.list({ accountId: 'acme' }, { headers: { 'x-request-id': 'keys-1' } });
      expect(infos[0]).toMatchObject({ status: 200, requestId: 'keys-1' });
      expect(recorded.sent[0]!.get('authorization')).toBe(`Bearer ${accessToken}`);
    });

    it.each([
      ['x-api-key', 'svc_sk_test_someoneElse_0000000000000000000000000000000000'],
      ['Authorization', 'Bearer not-mine'],
      ['x-account-id', 'globex'],
      ['If-Match', '"abc"'],
      ['if-none-match', '*'],
      ['content-type', 'text/plain'],
    ])(
      'refuses %s, a header the client owns, with a TypeError before anything is sent',
      async (name, value) => {
        const counted = countingFetch();
        const playbook = client({ fetch: counted.fetch, cache: true });
        const refused = await playbook.catalogs
          .get('svc', 'handbook', { headers: { [name]: value } })
          .catch((e: unknown) => e);
        expect(refused).toBeInstanceOf(TypeError);
        expect((refused as Error).message).toContain(name.toLowerCase());
        expect((refused as Error).message).not.toContain(value);
        const write = await playbook.catalogs
          .archive('runbooks', { headers: { [name]: value } })
          .catch((e: unknown) => e);
        expect(write).toBeInstanceOf(TypeError);
        expect(counted.calls).toBe(0);
      },
    );

    it('refuses a malformed header with a TypeError, neither sent nor retried as a lost connection', async () => {
      const counted = countingFetch();
      const refused = await client({ fetch: counted.fetch })
        .catalogs.list({}, { headers: { 'x-note': 'two\nlines' } })
        .catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(TypeError);
      expect(counted.calls).toBe(0);
    });
  });

  describe('frozen answers from the cache (D29)', () => {
    it('freezes what the cache keeps, to the last nested value: the next caller gets it unchanged', async () => {
      const playbook = client({ cache: true });
      const first = await playbook.resources.getByRef('svc', 'handbook', 'bravo');
      expect(Object.isFrozen(first)).toBe(true);
      expect(Object.isFrozen(first.currentVersion)).toBe(true);
      expect(Object.isFrozen(first.currentVersion.manifest)).toBe(true);
      expect(() => {
        (first.currentVersion as { content: string }).content = 'changed by a caller';
      }).toThrow(TypeError);
      const page = await playbook.catalogs.list();
      expect(Object.isFrozen(page.data)).toBe(true);
      expect(() => (page.data as unknown[]).pop()).toThrow(TypeError);
      const second = await playbook.resources.getByRef('svc', 'handbook', 'bravo');
      expect(second).toBe(first);
      expect(second.currentVersion.content).toBe('# bravo three\n');
      expect((await playbook.catalogs.list()).data).toHaveLength(3);
    });

    it("freezes what a store of the caller's own hands back, and leaves answers without a cache to the caller", async () => {
      const held = new Map<string, CachedAnswer>();
      // A store that keeps text and parses it again, as a shared cache would.
      const store = {
        get: (key: string) => {
          const answer = held.get(key);
          return answer && { etag: answer.etag, body: JSON.parse(JSON.stringify(answer.body)) };
        },
        set: (key: string, answer: CachedAnswer) => held.set(key, answer),
      };
      const infos: ResponseInfo[] = [];
      const playbook = client({ cache: store, onResponse: (info) => infos.push(info) });
      await playbook.catalogs.get('svc', 'handbook');
      const revalidated = await playbook.catalogs.get('svc', 'handbook');
      expect(infos.at(-1)).toMatchObject({ status: 304, fromCache: true });
      expect(Object.isFrozen(revalidated)).toBe(true);
      const uncached = await client().catalogs.get('svc', 'handbook');
      expect(Object.isFrozen(uncached)).toBe(false);
      uncached.name = 'mine to change';
      expect((await client().catalogs.get('svc', 'handbook')).name).not.toBe('mine to change');
    });
  });

  describe('parseApiKey and the constructor', () => {
    it('reads good keys as the service does, and tells mistyped and foreign strings apart', () => {
      for (let i = 0; i < 200; i++) {
        const { key, keyId } = generateApiKey(i % 2 === 0 ? 'test' : 'live');
        expect(parseApiKey(key)).toEqual({
          environment: serverParse(key)!.environment,
          keyId,
          checksumValid: true,
        });
        const last = key.at(-1) === 'a' ? 'b' : 'a';
        const mistyped = key.slice(0, -1) + last;
        expect(parseApiKey(mistyped)?.checksumValid).toBe(serverParse(mistyped) !== null);
      }
      const good = composeApiKey('test', 'Kq3ZkQwPq0LmT2Ab', 'a'.repeat(33));
      expect(parseApiKey(good.slice(0, -3))).toEqual({
        environment: 'test',
        keyId: 'Kq3ZkQwPq0LmT2Ab',
        checksumValid: false,
      });
      for (const foreign of [
        '',
        'ghp_0123456789abcdef0123456789abcdef0123',
        'svc_sk_prod_Kq3ZkQwPq0LmT2Ab_x',
        'sk_live_abc',
      ]) {
        expect(parseApiKey(foreign)).toBeNull();
      }
    });

    it('refuses a key that does not hold, and a choice of both or no credential, naming neither', () => {
      const mistyped = `${apiKey.slice(0, -1)}${apiKey.endsWith('A') ? 'B' : 'A'}`;
      expect(() => new Playbook({ apiKey: mistyped, baseUrl })).toThrow(TypeError);
      try {
        new Playbook({ apiKey: mistyped, baseUrl });
      } catch (error) {
        expect((error as Error).message).not.toContain(mistyped.split('_')[4]);
      }
      expect(() => new Playbook({ apiKey, accessToken, baseUrl })).toThrow('exactly one');
      expect(() => new Playbook({ baseUrl })).toThrow('exactly one');
    });

    it('refuses a baseUrl that is not http(s), or that holds a user name or password, without echoing it', () => {
      for (const url of ['ftp://playbook.example.com', 'playbook.example.com', '']) {
        expect(() => new Playbook({ apiKey, baseUrl: url }), url).toThrow('baseUrl must be an http(s) URL');
      }
      for (const url of ['https://ci:hunter2@playbook.example.com', 'http://ci@127.0.0.1:8080']) {
        expect(() => new Playbook({ apiKey, baseUrl: url }), url).toThrow(TypeError);
        try {
          new Playbook({ apiKey, baseUrl: url });
        } catch (error) {
          expect((error as Error).message).not.toMatch(/hunter2|ci@/);
        }
      }
    });
  });
});
