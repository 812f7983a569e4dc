import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readHead } from '../../src/changes/change-log.js';
import { listenLocally } from '../helpers/app.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { loggedChanges } from '../helpers/changes.js';
import { runCli } from '../helpers/cli.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { freePort } from '../helpers/servers.js';

/**
 * D29: `playbook keys` and `playbook audit` with PLAYBOOK_URL (or --url) act through a running service,
 * as the user of the access token in PLAYBOOK_ACCESS_TOKEN, never on storage.
 */
describe('playbook keys and audit through a running service (D29)', () => {
  let backend: TestBackend;
  let identity: TestIdentity;
  let app: FastifyInstance;
  let baseUrl: string;
  let remote: Record<string, string>;

  beforeAll(async () => {
    backend = await createTestBackend();
    identity = createTestIdentity(backend);
    app = await buildIdentityApp(backend, identity);
    baseUrl = await listenLocally(app);
    const token = await identity.mintToken({ user: 'ada', accounts: ['acme', 'globex'] });
    // The storage variables stay set: the command must not use them while PLAYBOOK_URL is.
    remote = { ...backend.env, PLAYBOOK_URL: baseUrl, PLAYBOOK_ACCESS_TOKEN: token };
  });
  afterAll(async () => {
    await app.close();
    await identity.close();
    await backend.cleanup();
  });

  const run = (args: string[], env: Record<string, string> = {}) => runCli(args, { ...remote, ...env });

  it('keys create prints the key alone on stdout; the write is the user’s, made through the API', async () => {
    const result = await run([
      'keys',
      'create',
      '--account',
      'acme',
      '--name',
      'ci',
      '--scope',
      'playbook:read',
    ]);
    expect(result.code).toBe(0);
    expect(result.stdout).toMatch(/^svc_sk_test_[A-Za-z0-9]+_[A-Za-z0-9]+\n$/);
    const verified = await identity.verifier.verify(result.stdout.trim());
    expect(verified.accountId).toBe('acme');
    expect(result.stderr).toBe(
      `API key ${verified.keyId} created for account acme (playbook:read); the key is shown this once: keep it secret\n`,
    );
    const [created] = (await loggedChanges(backend.databases.primary, 'acme')).filter(
      (change) => change.type === 'api_key.created' && change.target.id === verified.keyId,
    );
    // A request id: the write came through the service, as the token's user.
    expect(created).toMatchObject({ actor: { type: 'user', id: 'ada' }, requestId: expect.any(String) });
  });

  it('--url gives the service when PLAYBOOK_URL is not set, and wins over it', async () => {
    const { PLAYBOOK_URL: _unset, ...withoutUrl } = remote;
    const given = await runCli(
      [
        'keys',
        'create',
        '--account',
        'acme',
        '--name',
        'by flag',
        '--scope',
        'playbook:read',
        '--json',
        '--url',
        baseUrl,
      ],
      withoutUrl,
    );
    expect(given).toMatchObject({ code: 0, stderr: '' });
    const created = JSON.parse(given.stdout);
    expect(created).toMatchObject({ name: 'by flag', accountId: 'acme', key: expect.any(String) });
    // Nothing listens where PLAYBOOK_URL points: the flag is what is used.
    const nowhere = `http://127.0.0.1:${await freePort()}`;
    const listed = await run(['keys', 'list', '--account', 'acme', '--url', baseUrl], {
      PLAYBOOK_URL: nowhere,
    });
    expect(listed.code).toBe(0);
    expect(listed.stdout).toContain(`${created.id}\tactive\ttest\tplaybook:read\t`);
  });

  it('keys list prints the table, or the API’s list as JSON, without secrets', async () => {
    const minted = await identity.mintKey({ accountId: 'globex', name: 'tab\there\u202e' });
    const text = await run(['keys', 'list', '--account', 'globex']);
    expect(text).toMatchObject({ code: 0, stderr: '' });
    const lines = text.stdout.trim().split('\n');
    expect(lines[0]).toBe('id\tstatus\tenvironment\tscopes\tcreated\texpires\tlast used\tname\trestrictions');
    expect(lines[1]?.split('\t')).toEqual([
      minted.id,
      'active',
      'test',
      'playbook:read',
      expect.any(String),
      '-',
      '-',
      'tab\\u0009here\\u202e',
      'none',
    ]);
    const json = await run(['keys', 'list', '--account', 'globex', '--json']);
    expect(json).toMatchObject({ code: 0, stderr: '' });
    expect(json.stdout).not.toContain('\u202e');
    const answer = await app.inject({
      url: '/v3/identity/api-keys?accountId=globex',
      headers: await identity.tokenHeaders({ accounts: ['globex'] }),
    });
    expect(JSON.parse(json.stdout)).toEqual(answer.json().data);
    expect(json.stdout).not.toContain(minted.key.split('_')[4]);
  });

  it('keys list and audit read every page of the API (pages of 100)', async () => {
    const minted: string[] = [];
    for (let i = 0; i < 100; i++)
      minted.push((await identity.mintKey({ accountId: 'paged', name: `key ${i}` })).id);
    // Revoked keys are listed but no longer count against the account's cap of 100 active keys.
    for (const id of minted.slice(0, 5)) await identity.keys.revoke(id);
    for (let i = 100; i < 105; i++) await identity.mintKey({ accountId: 'paged', name: `key ${i}` });
    const token = await identity.mintToken({ user: 'ada', accounts: ['paged'] });

    const keys = await run(['keys', 'list', '--account', 'paged', '--json'], {
      PLAYBOOK_ACCESS_TOKEN: token,
    });
    expect(keys.code).toBe(0);
    expect(JSON.parse(keys.stdout).map((key: { id: string }) => key.id)).toEqual(
      (await identity.keys.list('paged')).map((key) => key.id),
    );

    const audit = await run(['audit', '--account', 'paged', '--json'], { PLAYBOOK_ACCESS_TOKEN: token });
    expect(audit.code).toBe(0);
    const events = audit.stdout
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line));
    // The account, 105 keys created and 5 revoked.
    expect(events).toHaveLength(111);
    const newest = [];
    let before: number | undefined;
    for (;;) {
      const batch = await identity.audit.newestBefore('paged', before, 500);
      newest.push(...batch.map((logged) => logged.event));
      if (batch.length < 500) break;
      before = batch.at(-1)!.seq;
    }
    expect(events).toEqual(newest);
  }, 60_000);

  it('keys roll prints the successor; keys revoke revokes it; both are the user’s writes', async () => {
    const old = await identity.mintKey({ accountId: 'acme', scopes: ['playbook:write'] });
    const rolled = await run(['keys', 'roll', old.id, '--overlap', '0']);
    expect(rolled.code).toBe(0);
    const successor = await identity.verifier.verify(rolled.stdout.trim());
    expect(successor).toMatchObject({ accountId: 'acme' });
    expect([...successor.scopes]).toEqual(['playbook:write']);
    expect(rolled.stderr).toBe(
      `API key ${old.id} rolled: ${successor.keyId} replaces it; ${old.id} no longer works; the key is shown this once: keep it secret\n`,
    );
    const fresh = createTestIdentity(backend);
    await expect(fresh.verifier.verify(old.key)).rejects.toThrow(/expired/);

    expect(await run(['keys', 'revoke', successor.keyId])).toEqual({
      code: 0,
      stdout: `key ${successor.keyId} revoked\n`,
      stderr: '',
    });
    await expect(fresh.verifier.verify(rolled.stdout.trim())).rejects.toThrow(/revoked/);
    await fresh.close();
    const changes = (await loggedChanges(backend.databases.primary, 'acme')).filter(
      (change) => change.target.id === old.id || change.target.id === successor.keyId,
    );
    expect(changes.map((change) => [change.type, change.actor])).toEqual([
      ['api_key.created', { type: 'user', id: 'test-user' }],
      ['api_key.rolled', { type: 'user', id: 'ada' }],
      ['api_key.revoked', { type: 'user', id: 'ada' }],
    ]);
  });

  it("audit lists the account's events newest first, as the audit list answers them", async () => {
    const headers = await identity.tokenHeaders({ accounts: ['acme'] });
    const answer = (
      await app.inject({ url: '/v3/identity/audit-events?accountId=acme&pageSize=100', headers })
    ).json();
    expect(answer.data.length).toBeGreaterThan(3);
    const json = await run(['audit', '--account', 'acme', '--json']);
    expect(json).toMatchObject({ code: 0, stderr: '' });
    expect(
      json.stdout
        .trim()
        .split('\n')
        .map((line) => JSON.parse(line)),
    ).toEqual(answer.data);
    const text = await run(['audit', '--account', 'acme']);
    const lines = text.stdout.trim().split('\n');
    expect(lines[0]).toBe('at\taction\tactor\ttarget\trequest\tsummary');
    expect(lines.slice(1).map((line) => line.split('\t').slice(0, 5))).toEqual(
      answer.data.map(
        (event: {
          at: string;
          action: string;
          actor: { type: string; id?: string };
          target: string;
          requestId?: string;
        }) => [
          event.at,
          event.action,
          event.actor.id === undefined ? event.actor.type : `${event.actor.type}:${event.actor.id}`,
          event.target,
          event.requestId ?? '-',
        ],
      ),
    );
  });

  describe("the service's refusals: exit 1, one line with the status, the problem's code and detail", () => {
    it.each([
      [
        'an account the token does not name',
        ['keys', 'create', '--account', 'initech', '--name', 'n', '--scope', 'playbook:read'],
        /^playbook: keys create failed: 403 forbidden: the access token does not let this user act for that account \(request [\w-]+\)\n$/,
      ],
      [
        'a key that does not exist',
        ['keys', 'revoke', 'NoSuchKey0000000'],
        /^playbook: keys revoke failed: 404 not_found: no such API key \(request [\w-]+\)\n$/,
      ],
      [
        'a roll of a key that does not exist',
        ['keys', 'roll', 'NoSuchKey0000000'],
        /^playbook: keys roll failed: 404 not_found: no such API key \(request [\w-]+\)\n$/,
      ],
      [
        "another account's list",
        ['keys', 'list', '--account', 'initech'],
        /^playbook: keys list failed: 403 forbidden: .+\n$/,
      ],
      [
        "another account's audit",
        ['audit', '--account', 'initech'],
        /^playbook: audit failed: 403 forbidden: .+\n$/,
      ],
    ])('%s', async (_label, args, said) => {
      const head = await readHead(backend.databases.primary);
      const result = await run(args);
      expect(result.code).toBe(1);
      expect(result.stdout).toMatch(/^(at\t[^\n]*\n)?$/);
      expect(result.stderr).toMatch(said);
      expect(await readHead(backend.databases.primary)).toBe(head);
    });

    it('a revoked key cannot be rolled (409)', async () => {
      const { id } = await identity.mintKey({ accountId: 'acme' });
      await identity.keys.revoke(id);
      const result = await run(['keys', 'roll', id]);
      expect(result).toMatchObject({ code: 1, stdout: '' });
      expect(result.stderr).toMatch(/^playbook: keys roll failed: 409 key_inactive: the API key is revoked/);
    });

    it('an API key is no access token: key management refuses it (401), and the key is never printed', async () => {
      const { key } = await identity.mintKey({
        accountId: 'acme',
        scopes: ['playbook:read', 'playbook:write'],
      });
      const result = await run(['keys', 'list', '--account', 'acme'], { PLAYBOOK_ACCESS_TOKEN: key });
      expect(result.code).toBe(1);
      expect(result.stderr).toMatch(
        /^playbook: keys list failed: 401 unauthenticated: the access token .+\n$/,
      );
      expect(result.stderr).not.toContain(key.split('_')[4]);
    });

    it('an expired or forged token (401)', async () => {
      const expired = await identity.mintToken({
        accounts: ['acme'],
        ttlSeconds: 60,
        issuedAt: Math.floor(Date.now() / 1000) - 3600,
      });
      const result = await run(['audit', '--account', 'acme'], { PLAYBOOK_ACCESS_TOKEN: expired });
      expect(result.code).toBe(1);
      expect(result.stderr).toMatch(/^playbook: audit failed: 401 unauthenticated: the access token .+\n$/);
      const forged = await run(['keys', 'list', '--account', 'acme'], {
        PLAYBOOK_ACCESS_TOKEN: 'not.a.token',
      });
      expect(forged.code).toBe(1);
      expect(forged.stderr).toMatch(
        /^playbook: keys list failed: 401 unauthenticated: the access token .+\n$/,
      );
    });

    it('no service where PLAYBOOK_URL points', async () => {
      const nowhere = `http://127.0.0.1:${await freePort()}`;
      const result = await run(
        ['keys', 'create', '--account', 'acme', '--name', 'n', '--scope', 'playbook:read'],
        {
          PLAYBOOK_URL: nowhere,
        },
      );
      expect(result).toMatchObject({ code: 1, stdout: '' });
      expect(result.stderr).toMatch(/^playbook: keys create failed: no answer network_error: .+\n$/);
    });
  });

  describe('bad usage exits 2 and sends nothing', () => {
    it.each([
      ['no --account', ['keys', 'list'], {}, '--account'],
      [
        'an unknown scope',
        ['keys', 'create', '--account', 'acme', '--name', 'n', '--scope', 'read'],
        {},
        'is not a scope',
      ],
      ['a bad key id', ['keys', 'revoke', 'no/such'], {}, 'is not a key id'],
      ['a bad key id to roll', ['keys', 'roll', 'x'], {}, 'is not a key id'],
      ['no --account for audit', ['audit'], {}, '--account'],
      [
        'no access token',
        ['keys', 'list', '--account', 'acme'],
        { PLAYBOOK_ACCESS_TOKEN: '' },
        'PLAYBOOK_ACCESS_TOKEN must hold a user access token',
      ],
      [
        'no access token for audit',
        ['audit', '--account', 'acme'],
        { PLAYBOOK_ACCESS_TOKEN: '' },
        'PLAYBOOK_ACCESS_TOKEN must hold a user access token',
      ],
      [
        'a PLAYBOOK_URL that is no http(s) URL',
        ['keys', 'list', '--account', 'acme'],
        { PLAYBOOK_URL: 'localhost:8080' },
        'PLAYBOOK_URL must be an http(s) URL',
      ],
      [
        'a --url that is no http(s) URL',
        ['audit', '--account', 'acme', '--url', 'ftp://example.com'],
        {},
        '--url must be an http(s) URL',
      ],
    ])('%s', async (_label, args, env, said) => {
      const head = await readHead(backend.databases.primary);
      const result = await run(args, env);
      expect(result.code).toBe(2);
      expect(result.stdout).toBe('');
      expect(result.stderr).toContain(said);
      expect(await readHead(backend.databases.primary)).toBe(head);
    });
  });
});
