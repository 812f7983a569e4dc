import { hash } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { composeApiKey } from '../../src/schemas/api-key-format.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { loggedChanges } from '../helpers/changes.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { givenAccount, givenCatalog } from '../helpers/fixtures.js';
import { KeyList, LEAKS, newSigner, report, signed } from '../helpers/leak-reports.js';

describe('leak reports in the secret scanning partner format (D22)', () => {
  let backend: TestBackend;
  let identity: TestIdentity;
  let app: FastifyInstance;
  const keyList = new KeyList();
  const current = newSigner('a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90');

  beforeAll(async () => {
    const url = await keyList.start();
    keyList.listed = [current];
    backend = await createTestBackend();
    identity = createTestIdentity(backend, {
      env: { PLAYBOOK_LEAK_REPORT_KEYS_URL: url, PLAYBOOK_AUTH_FAILURE_MAX: '1000' },
      options: { leakKeysRefetchAfterMs: 0 },
    });
    app = await buildIdentityApp(backend, identity);
    await givenAccount(backend.databases.primary, 'acme');
    await givenCatalog(backend.databases.primary, { slug: 'handbook' });
  });
  afterAll(async () => {
    await app.close();
    await identity.close();
    await backend.cleanup();
    await keyList.stop();
  });
  beforeEach(() => {
    keyList.listed = [current];
    keyList.down = false;
  });

  const post = (body: string, headers: Record<string, string>) =>
    app.inject({ method: 'POST', url: LEAKS, headers, payload: body });
  const readWith = async (key: string) =>
    (await app.inject({ url: '/v3/playbook/catalogs', headers: { 'x-api-key': key } })).statusCode;

  it('revokes a reported live key at once and answers one verdict per token, naming none of them', async () => {
    const leaked = await identity.mintKey({ accountId: 'acme' });
    const bystander = await identity.mintKey({ accountId: 'acme' });
    expect(await readWith(leaked.key)).toBe(200);
    const random = leaked.key.split('_')[4]!.slice(0, 33);
    const tokens = [
      leaked.key,
      // Well-formed, checksummed, but of the live environment: not a key of this deployment.
      composeApiKey('live', leaked.id, random),
      // A look-alike whose checksum fails.
      `${leaked.key.slice(0, -1)}${leaked.key.endsWith('A') ? 'B' : 'A'}`,
      // Well-formed, an id no key has.
      composeApiKey('test', 'ZZZZZZZZZZZZZZZZ', random),
      // The right id with another secret.
      composeApiKey('test', leaked.id, 'x'.repeat(33)),
      'not a key at all',
    ];
    const body = report(...tokens);
    const response = await post(body, signed(body, current));
    expect(response.statusCode, response.body).toBe(200);
    expect(response.headers['cache-control']).toBe('no-store');
    expect(response.json()).toEqual(
      tokens.map((token, i) => ({
        token_hash: hash('sha256', token),
        token_type: 'playbook_api_key',
        label: i === 0 ? 'true_positive' : 'false_positive',
      })),
    );
    for (const token of tokens) expect(response.body).not.toContain(token);
    expect(response.headers['ratelimit-limit']).toBeDefined();
    const refused = await app.inject({ url: '/v3/playbook/catalogs', headers: leaked.headers });
    expect(refused.statusCode).toBe(401);
    expect(refused.json().detail).toBe('the API key has been revoked');
    expect(await readWith(bystander.key)).toBe(200);
    // D26: the revocation is a change of the log, written with it.
    const changes = await loggedChanges(backend.databases.primary, 'acme');
    expect(changes.filter((change) => change.type === 'api_key.leak_revoked')).toEqual([
      {
        seq: expect.any(Number),
        id: expect.any(String),
        type: 'api_key.leak_revoked',
        at: expect.any(String),
        namespace: 'acme',
        target: { kind: 'api_key', id: leaked.id },
        actor: { type: 'leak-report', id: 'https://github.com/octo/app/blob/0123abc/config.env' },
        requestId: response.headers['x-request-id'],
        summary: `API key ${leaked.id} revoked: reported leaked`,
      },
    ]);
  });

  it('answers a repeated report alike, and the key stays revoked', async () => {
    const leaked = await identity.mintKey({ accountId: 'acme' });
    const body = report(leaked.key, leaked.key);
    for (let i = 0; i < 2; i++) {
      const response = await post(body, signed(body, current));
      expect(response.statusCode).toBe(200);
      expect(response.json().map((verdict: { label: string }) => verdict.label)).toEqual([
        'true_positive',
        'true_positive',
      ]);
    }
    expect(await readWith(leaked.key)).toBe(401);
  });

  it('401 without a valid signature, revoking nothing: missing, wrong body, unlisted key, other curve, not base64 DER', async () => {
    const leaked = await identity.mintKey({ accountId: 'acme' });
    const body = report(leaked.key);
    const stranger = newSigner(current.identifier);
    const otherCurve = newSigner(current.identifier, 'secp384r1');
    const cases: [string, Record<string, string>, string][] = [
      [body, { 'content-type': 'application/json' }, 'must be signed'],
      [body, { ...signed(body, current), 'github-public-key-signature': '' }, 'must be signed'],
      [body, signed(report('something else'), current), 'does not verify'],
      [body, signed(body, newSigner('0000unlisted')), 'not listed'],
      [body, signed(body, stranger), 'does not verify'],
      [body, signed(body, otherCurve), 'does not verify'],
      [body, { ...signed(body, current), 'github-public-key-signature': 'bm90IERFUg==' }, 'does not verify'],
      [body, { ...signed(body, current), 'github-public-key-signature': '%%%' }, 'does not verify'],
    ];
    for (const [payload, headers, detail] of cases) {
      const response = await post(payload, headers);
      expect(response.statusCode, detail).toBe(401);
      expect(response.headers['content-type']).toMatch(/^application\/problem\+json/);
      expect(response.json()).toMatchObject({ code: 'unauthenticated' });
      expect(response.json().detail).toContain(detail);
      expect(response.headers['ratelimit-remaining']).toBeDefined();
      expect(response.headers['x-request-id']).toBe(response.json().requestId);
    }
    expect(await readWith(leaked.key)).toBe(200);
  });

  it('checks the signature before the body: unsigned nonsense is 401, signed nonsense a 400 naming the field', async () => {
    const unsigned = await post('[{"token": 7}]', { 'content-type': 'application/json' });
    expect(unsigned.statusCode).toBe(401);
    for (const [body, name] of [
      ['[]', '(root)'],
      ['{"token":"x"}', '(root)'],
      ['[{"type":"t"}]', '[0].token'],
      [JSON.stringify([{ token: 'x'.repeat(1001), type: 't' }]), '[0].token'],
    ] as const) {
      const response = await post(body, signed(body, current));
      expect(response.statusCode, body).toBe(400);
      expect(response.json().errors[0]).toMatchObject({ in: 'body', name });
    }
  });

  it('keeps the key list by identifier, and fetches it again for an identifier it does not know (a rotation)', async () => {
    const leaked = await identity.mintKey({ accountId: 'acme' });
    const before = keyList.fetches;
    const body = report('nothing here');
    for (let i = 0; i < 3; i++) expect((await post(body, signed(body, current))).statusCode).toBe(200);
    expect(keyList.fetches).toBe(before);
    const next = newSigner('b1b2b3');
    keyList.listed = [current, next];
    const rotated = report(leaked.key);
    const response = await post(rotated, signed(rotated, next));
    expect(response.statusCode).toBe(200);
    expect(response.json()[0].label).toBe('true_positive');
    expect(keyList.fetches).toBe(before + 1);
  });

  it('503 while the key list cannot be fetched for an unknown identifier; known keys still verify', async () => {
    keyList.down = true;
    const body = report('nothing here');
    const unknown = await post(body, signed(body, newSigner('c1c2c3')));
    expect(unknown.statusCode).toBe(503);
    expect(unknown.json()).toMatchObject({ code: 'unavailable' });
    expect(unknown.body).not.toContain('127.0.0.1');
    expect((await post(body, signed(body, current))).statusCode).toBe(200);
  });
});

describe('leak reports where they are not set up (D22)', () => {
  let backend: TestBackend;
  let identity: TestIdentity;
  let app: FastifyInstance;

  beforeAll(async () => {
    backend = await createTestBackend();
    identity = createTestIdentity(backend);
    app = await buildIdentityApp(backend, identity);
  });
  afterAll(async () => {
    await app.close();
    await identity.close();
    await backend.cleanup();
  });

  it('501 not_implemented, naming the setting, and nothing revoked', async () => {
    const key = await identity.mintKey({ accountId: 'acme' });
    const response = await app.inject({
      method: 'POST',
      url: LEAKS,
      headers: { 'content-type': 'application/json' },
      payload: report(key.key),
    });
    expect(response.statusCode).toBe(501);
    expect(response.json()).toMatchObject({
      code: 'not_implemented',
      detail: 'leak reports are not set up on this deployment (PLAYBOOK_LEAK_REPORT_KEYS_URL)',
    });
    expect((await app.inject({ url: '/v3/playbook/catalogs', headers: key.headers })).statusCode).toBe(200);
  });
});
