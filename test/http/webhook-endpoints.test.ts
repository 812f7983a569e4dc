import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { loggedChanges } from '../helpers/changes.js';
import { startWebhookInstance, userHeaders, type WebhookInstance } from '../helpers/webhooks.js';

/**
 * D28: webhook endpoints, managed by a user of the account with an access token. Creation shows the
 * signing secret once; lists, reads, changes and deletions never do; every change of an endpoint is a
 * change of the log (audited); bad input is a 400 naming the field; another account's endpoint is 404.
 */

const BASE = '/v3/identity/webhook-endpoints';
const SECRET = /^whsec_[A-Za-z0-9+/]{32,88}={0,2}$/;

describe('webhook endpoint management (D28)', () => {
  let backend: TestBackend;
  let instance: WebhookInstance;
  let ada: Record<string, string>;
  let eve: Record<string, string>;

  beforeAll(async () => {
    backend = await createTestBackend();
    // HTTP and private addresses refused, as in production.
    instance = await startWebhookInstance(backend, {
      deliver: false,
      env: { PLAYBOOK_WEBHOOK_ALLOW_HTTP: 'false', PLAYBOOK_WEBHOOK_ALLOW_PRIVATE: 'false' },
    });
    ada = await userHeaders(instance, ['acme']);
    eve = await userHeaders(instance, ['globex'], 'eve');
  });
  afterAll(async () => {
    await instance?.close();
    await backend?.cleanup();
  });

  const create = (headers: Record<string, string>, payload: Record<string, unknown>) =>
    instance.app.inject({ method: 'POST', url: BASE, headers, payload });
  const valid = (overrides: Record<string, unknown> = {}) => ({
    accountId: 'acme',
    url: 'https://hooks.example.com/playbook?team=7',
    events: ['resource.version_published', 'catalog.archived'],
    description: 'CI cache',
    ...overrides,
  });

  it('creates an endpoint: 201 with a whsec_ secret shown once, never in a later answer, the log or the audit', async () => {
    const created = await create(ada, valid());
    expect(created.statusCode, created.body).toBe(201);
    expect(created.headers['cache-control']).toBe('no-store');
    const endpoint = created.json();
    expect(endpoint).toMatchObject({
      accountId: 'acme',
      url: 'https://hooks.example.com/playbook?team=7',
      events: ['resource.version_published', 'catalog.archived'],
      description: 'CI cache',
      status: 'enabled',
    });
    expect(endpoint.secret).toMatch(SECRET);
    expect(Buffer.from(endpoint.secret.slice(6), 'base64').length).toBe(32);
    expect(endpoint.createdAt).toBe(endpoint.updatedAt);

    const secret: string = endpoint.secret;
    const answers = [
      await instance.app.inject({ url: `${BASE}?accountId=acme`, headers: ada }),
      await instance.app.inject({ url: `${BASE}/${endpoint.id}`, headers: ada }),
      await instance.app.inject({
        method: 'PATCH',
        url: `${BASE}/${endpoint.id}`,
        headers: ada,
        payload: { description: 'CI cache, renamed' },
      }),
      await instance.app.inject({ url: `${BASE}/${endpoint.id}/deliveries`, headers: ada }),
      await instance.app.inject({ url: '/v3/identity/audit-events?accountId=acme', headers: ada }),
    ];
    for (const answer of answers) {
      expect(answer.statusCode, answer.body).toBe(200);
      expect(answer.body).not.toContain(secret);
      expect(answer.body).not.toContain(secret.slice(6));
    }
    expect(answers[1]!.json()).not.toHaveProperty('secret');
    // At rest it is sealed: neither the secret nor its key bytes are stored as they are.
    const stored = await backend.databases.primary
      .selectFrom('webhook_endpoints')
      .selectAll()
      .where('id', '=', endpoint.id)
      .executeTakeFirstOrThrow();
    expect(JSON.stringify(stored)).not.toContain(secret.slice(6));
    expect(stored.secret_sealed).toMatch(/^v1\./);
    // Every log line of every request so far, at trace level: the secret is in none.
    expect(instance.rawLogs.length).toBeGreaterThan(0);
    for (const line of instance.rawLogs) expect(line).not.toContain(secret.slice(6));
    const changes = await loggedChanges(backend.databases.primary, 'acme');
    for (const change of changes) expect(JSON.stringify(change)).not.toContain(secret.slice(6));
  });

  it('lists in the envelope, oldest first, filtered by account; reads one; 304 on revalidation', async () => {
    const second = (await create(ada, valid({ url: 'https://second.example.com/', events: ['*'] }))).json();
    await create(eve, valid({ accountId: 'globex', url: 'https://globex.example.com/' }));
    const list = await instance.app.inject({ url: `${BASE}?accountId=acme&pageSize=1&page=2`, headers: ada });
    expect(list.statusCode).toBe(200);
    const page = list.json();
    expect(page.meta).toEqual({ page: 2, pageSize: 1, pageCount: page.meta.total, total: page.meta.total });
    expect(page.meta.total).toBe(2);
    expect(page.data.map((e: { id: string }) => e.id)).toEqual([second.id]);
    const all = (await instance.app.inject({ url: `${BASE}?accountId=acme`, headers: ada })).json();
    expect(all.data.every((e: { accountId: string }) => e.accountId === 'acme')).toBe(true);
    const one = await instance.app.inject({ url: `${BASE}/${second.id}`, headers: ada });
    expect(one.json()).toMatchObject({ id: second.id, events: ['*'], status: 'enabled' });
    const again = await instance.app.inject({
      url: `${BASE}/${second.id}`,
      headers: { ...ada, 'if-none-match': one.headers.etag as string },
    });
    expect(again.statusCode).toBe(304);
  });

  it('updates url, events, description and status, each a change of the log; nothing changed writes nothing', async () => {
    const endpoint = (await create(ada, valid({ url: 'https://patch.example.com/' }))).json();
    const patch = (payload: Record<string, unknown>) =>
      instance.app.inject({ method: 'PATCH', url: `${BASE}/${endpoint.id}`, headers: ada, payload });
    const before = (await loggedChanges(backend.databases.primary, 'acme')).length;
    const changed = await patch({
      url: 'https://patched.example.com/hook',
      events: ['*'],
      description: null,
      status: 'disabled',
    });
    expect(changed.statusCode, changed.body).toBe(200);
    expect(changed.json()).toMatchObject({
      url: 'https://patched.example.com/hook',
      events: ['*'],
      status: 'disabled',
    });
    expect(changed.json()).not.toHaveProperty('description');
    expect(changed.json()).not.toHaveProperty('secret');
    const enabled = await patch({ status: 'enabled' });
    expect(enabled.json().status).toBe('enabled');
    const unchanged = await patch({ status: 'enabled' });
    expect(unchanged.statusCode).toBe(200);
    const changes = (await loggedChanges(backend.databases.primary, 'acme')).slice(before);
    expect(changes.map((c) => c.type)).toEqual(['webhook_endpoint.disabled', 'webhook_endpoint.updated']);
    expect(changes[0]).toMatchObject({
      namespace: 'acme',
      target: { kind: 'webhook_endpoint', id: endpoint.id },
      actor: { type: 'user', id: 'ada' },
    });
    // Audit summaries name the host, never the path or query, which may carry a token.
    expect(changes[0]!.summary).toContain('patched.example.com');
    expect(changes[0]!.summary).not.toContain('/hook');
    const audit = (
      await instance.app.inject({ url: '/v3/identity/audit-events?accountId=acme', headers: ada })
    ).json();
    expect(audit.data.map((e: { action: string }) => e.action)).toEqual(
      expect.arrayContaining([
        'webhook_endpoint.created',
        'webhook_endpoint.disabled',
        'webhook_endpoint.updated',
      ]),
    );
  });

  it('deletes: 204, a change of the log, then 404', async () => {
    const endpoint = (await create(ada, valid({ url: 'https://delete.example.com/' }))).json();
    const deleted = await instance.app.inject({
      method: 'DELETE',
      url: `${BASE}/${endpoint.id}`,
      headers: ada,
    });
    expect(deleted.statusCode).toBe(204);
    expect((await instance.app.inject({ url: `${BASE}/${endpoint.id}`, headers: ada })).statusCode).toBe(404);
    const again = await instance.app.inject({
      method: 'DELETE',
      url: `${BASE}/${endpoint.id}`,
      headers: ada,
    });
    expect(again.statusCode).toBe(404);
    const changes = await loggedChanges(backend.databases.primary, 'acme');
    expect(changes.at(-1)).toMatchObject({ type: 'webhook_endpoint.deleted', target: { id: endpoint.id } });
  });

  it.each([
    ['url', { url: 'not a url' }, 'url'],
    ['an http url', { url: 'http://hooks.example.com/' }, 'url'],
    ['a user and password in the url', { url: 'https://user:pass@hooks.example.com/' }, 'url'],
    ['a fragment', { url: 'https://hooks.example.com/#x' }, 'url'],
    ['a loopback address', { url: 'https://127.0.0.1/' }, 'url'],
    ['an IPv6 loopback address', { url: 'https://[::1]/' }, 'url'],
    ['the metadata address', { url: 'https://169.254.169.254/latest' }, 'url'],
    ['a mapped private address', { url: 'https://[::ffff:10.0.0.1]/' }, 'url'],
    ['an IPv4-translated loopback address', { url: 'https://[::ffff:0:7f00:1]/' }, 'url'],
    ['an IPv4-translated address in dotted form', { url: 'https://[::ffff:0:127.0.0.1]/' }, 'url'],
    ['an IPv4-translated public address', { url: 'https://[::ffff:0:808:808]/' }, 'url'],
    ['a mapped loopback address in hex', { url: 'https://[::ffff:7f00:1]/' }, 'url'],
    ['a NAT64 metadata address', { url: 'https://[64:ff9b::a9fe:a9fe]/' }, 'url'],
    ['a 6to4 private address', { url: 'https://[2002:a00:1::1]/' }, 'url'],
    ['loopback as one decimal number', { url: 'https://2130706433/' }, 'url'],
    ['loopback in octal', { url: 'https://0177.0.0.1/' }, 'url'],
    ['loopback in hex', { url: 'https://0x7f.0.0.1/' }, 'url'],
    ['loopback in short form', { url: 'https://127.1/' }, 'url'],
    ['the metadata address as one number', { url: 'https://2852039166/' }, 'url'],
    ['an IPv6 link-local address', { url: 'https://[fe80::1]/' }, 'url'],
    ["AWS's IPv6 metadata address", { url: 'https://[fd00:ec2::254]/' }, 'url'],
    ["Alibaba's metadata address", { url: 'https://100.100.100.200/' }, 'url'],
    ['a private address', { url: 'https://192.168.1.10/' }, 'url'],
    ['the unspecified address', { url: 'https://0.0.0.0/' }, 'url'],
    ['localhost', { url: 'https://localhost:8443/' }, 'url'],
    ['a .localhost name', { url: 'https://app.localhost/' }, 'url'],
    ['an overlong url', { url: `https://hooks.example.com/${'a'.repeat(2100)}` }, 'url'],
    ['an ftp url', { url: 'ftp://hooks.example.com/' }, 'url'],
    ['no events', { events: [] }, 'events'],
    ['an unknown event type', { events: ['catalog.created', 'catalog.deleted'] }, 'events[1]'],
    ['a type twice', { events: ['catalog.created', 'catalog.created'] }, 'events'],
    ['* beside types', { events: ['*', 'catalog.created'] }, 'events'],
    ['an unknown field', { secret: 'whsec_mine' }, 'secret'],
    ['a description with control characters', { description: 'a\u0000b' }, 'description'],
    ['no account', { accountId: undefined }, 'accountId'],
  ])('refuses %s: 400 naming the field, nothing written', async (_what, overrides, field) => {
    const before = await backend.databases.primary
      .selectFrom('webhook_endpoints')
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .executeTakeFirstOrThrow();
    const answer = await create(ada, valid(overrides));
    expect(answer.statusCode, answer.body).toBe(400);
    expect(answer.json().code).toBe('invalid_request');
    expect(answer.json().errors.map((e: { name: string }) => e.name)).toContain(field);
    const after = await backend.databases.primary
      .selectFrom('webhook_endpoints')
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .executeTakeFirstOrThrow();
    expect(Number(after.n)).toBe(Number(before.n));
  });

  it('refuses a PATCH with no field, or an unknown status', async () => {
    const endpoint = (await create(ada, valid({ url: 'https://bad-patch.example.com/' }))).json();
    for (const payload of [
      {},
      { status: 'paused' },
      { url: 'http://plain.example.com/' },
      { url: 'https://[::ffff:0:7f00:1]/' },
      { url: 'https://2130706433/' },
    ]) {
      const answer = await instance.app.inject({
        method: 'PATCH',
        url: `${BASE}/${endpoint.id}`,
        headers: ada,
        payload,
      });
      expect(answer.statusCode, JSON.stringify(payload)).toBe(400);
    }
  });

  it('another account: 403 to create or list for it, 404 for its endpoints whatever the operation', async () => {
    expect((await create(eve, valid())).statusCode).toBe(403);
    expect((await instance.app.inject({ url: `${BASE}?accountId=acme`, headers: eve })).statusCode).toBe(403);
    const endpoint = (await create(ada, valid({ url: 'https://private-to-acme.example.com/' }))).json();
    const delivery = '0190c2a4-0000-7000-8000-000000000000';
    for (const [method, url, payload] of [
      ['GET', `${BASE}/${endpoint.id}`, undefined],
      ['PATCH', `${BASE}/${endpoint.id}`, { status: 'disabled' }],
      ['DELETE', `${BASE}/${endpoint.id}`, undefined],
      ['GET', `${BASE}/${endpoint.id}/deliveries`, undefined],
      ['POST', `${BASE}/${endpoint.id}/test`, undefined],
      ['POST', `${BASE}/${endpoint.id}/deliveries/${delivery}/retry`, undefined],
    ] as const) {
      const answer = await instance.app.inject({
        method,
        url,
        headers: eve,
        ...(payload ? { payload } : {}),
      });
      expect(answer.statusCode, `${method} ${url}`).toBe(404);
      expect(answer.json().code).toBe('not_found');
    }
    expect((await instance.app.inject({ url: `${BASE}/${endpoint.id}`, headers: ada })).json().status).toBe(
      'enabled',
    );
  });

  it("another account's delivery: 404 through one's own endpoint, listed nowhere but its own endpoint's attempts", async () => {
    const theirs = (await create(ada, valid({ url: 'https://acme-deliveries.example.com/' }))).json();
    const test = await instance.app.inject({
      method: 'POST',
      url: `${BASE}/${theirs.id}/test`,
      headers: ada,
    });
    expect(test.statusCode).toBe(202);
    const delivery = test.json();
    const own = (
      await create(eve, valid({ accountId: 'globex', url: 'https://globex-deliveries.example.com/' }))
    ).json();
    const retried = await instance.app.inject({
      method: 'POST',
      url: `${BASE}/${own.id}/deliveries/${delivery.id}/retry`,
      headers: eve,
    });
    expect(retried.statusCode).toBe(404);
    expect(retried.json().code).toBe('not_found');
    const listed = await instance.app.inject({ url: `${BASE}/${own.id}/deliveries`, headers: eve });
    expect(listed.statusCode).toBe(200);
    expect(listed.json().data).toEqual([]);
    // Untouched: still pending, never attempted, due when it was.
    const stored = await backend.databases.primary
      .selectFrom('webhook_deliveries')
      .selectAll()
      .where('id', '=', delivery.id)
      .executeTakeFirstOrThrow();
    expect(stored).toMatchObject({ endpoint_id: theirs.id, status: 'pending', attempts: 0 });
    expect(stored.next_attempt_at).toBe(delivery.nextAttemptAt);
  });

  it('takes an access token only: an API key is 401, no credential is 401; a malformed id is 400', async () => {
    const key = await instance.services.identity.keys.createFor(
      { subject: 'ada', accounts: ['acme'] },
      { name: 'reader', accountId: 'acme', scopes: ['playbook:read', 'playbook:write'] },
    );
    expect(
      (await instance.app.inject({ url: `${BASE}?accountId=acme`, headers: { 'x-api-key': key.key } }))
        .statusCode,
    ).toBe(401);
    expect((await instance.app.inject({ url: `${BASE}?accountId=acme` })).statusCode).toBe(401);
    const bad = await instance.app.inject({ url: `${BASE}/not-a-uuid`, headers: ada });
    expect(bad.statusCode).toBe(400);
    expect(bad.json().errors[0].name).toBe('endpointId');
  });

  it('holds at most 20 endpoints per account: the 21st is 400 limit_reached, deleting one makes room', async () => {
    const team = await userHeaders(instance, ['initech'], 'bob');
    const made: string[] = [];
    for (let i = 0; i < 20; i++) {
      const answer = await create(
        team,
        valid({ accountId: 'initech', url: `https://hook-${i}.example.com/` }),
      );
      expect(answer.statusCode, answer.body).toBe(201);
      made.push(answer.json().id);
    }
    const over = await create(
      team,
      valid({ accountId: 'initech', url: 'https://one-too-many.example.com/' }),
    );
    expect(over.statusCode).toBe(400);
    expect(over.json().code).toBe('limit_reached');
    await instance.app.inject({ method: 'DELETE', url: `${BASE}/${made[0]}`, headers: team });
    expect(
      (await create(team, valid({ accountId: 'initech', url: 'https://room.example.com/' }))).statusCode,
    ).toBe(201);
  });

  it('sending to a disabled endpoint is 409 endpoint_disabled', async () => {
    const endpoint = (await create(ada, valid({ url: 'https://disabled.example.com/' }))).json();
    await instance.app.inject({
      method: 'PATCH',
      url: `${BASE}/${endpoint.id}`,
      headers: ada,
      payload: { status: 'disabled' },
    });
    const test = await instance.app.inject({
      method: 'POST',
      url: `${BASE}/${endpoint.id}/test`,
      headers: ada,
    });
    expect(test.statusCode).toBe(409);
    expect(test.json().code).toBe('endpoint_disabled');
  });
});
