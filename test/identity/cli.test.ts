import fs from 'node:fs/promises';
import path from 'node:path';
import type { Command } from 'commander';
import { decodeJwt } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEV_KEY_FILE } from '../../src/auth/dev-signer.js';
import { readHead } from '../../src/changes/change-log.js';
import { buildProgram, createContext } from '../../src/cli/program.js';
import { composeApiKey } from '../../src/schemas/api-key-format.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { loggedChanges } from '../helpers/changes.js';
import { Capture, runCli, spawnCli } from '../helpers/cli.js';
import { createTestIdentity, type TestIdentity } from '../helpers/credentials.js';

/** `keys create` with a valid account, name and scope, each replaced (or left out: null) as given. */
function creating(changes: Record<string, string | null>): string[] {
  const flags = { '--account': 'acme', '--name': 'n', '--scope': 'playbook:read', ...changes };
  return [
    'keys',
    'create',
    ...Object.entries(flags).flatMap(([flag, value]) => (value === null ? [] : [flag, value])),
  ];
}

describe('playbook token and playbook keys (D14)', () => {
  let backend: TestBackend;
  let identity: TestIdentity;

  beforeAll(async () => {
    backend = await createTestBackend();
    identity = createTestIdentity(backend);
  });
  afterAll(async () => {
    await identity.close();
    await backend.cleanup();
  });

  const run = (args: string[], env: Record<string, string> = {}) => runCli(args, { ...backend.env, ...env });

  describe('playbook token', () => {
    it('prints only a token the service accepts, signed with a key made in the data directory', async () => {
      const result = await run(['token', '--user', 'ada', '--account', 'acme', '--account', 'globex']);
      expect(result).toMatchObject({ code: 0, stderr: '' });
      expect(result.stdout).toMatch(/^[\w-]+\.[\w-]+\.[\w-]+\n$/);
      const verified = await identity.tokens.verify(result.stdout.trim());
      // An hour by default: `exp` is in seconds since the epoch.
      const hourFromNow = Math.floor(Date.now() / 1000) + 3600;
      expect(verified).toEqual({
        subject: 'ada',
        accounts: ['acme', 'globex'],
        expiresAt: expect.any(Number),
      });
      expect(Math.abs(verified.expiresAt - hourFromNow)).toBeLessThanOrEqual(5);
      const stat = await fs.stat(path.join(backend.workDir, DEV_KEY_FILE));
      expect(stat.mode & 0o777).toBe(0o600);
    });

    it('takes --ttl in seconds (default one hour)', async () => {
      const short = decodeJwt(
        (await run(['token', '--user', 'ada', '--account', 'acme', '--ttl', '90'])).stdout,
      );
      expect(short.exp! - short.iat!).toBe(90);
      const usual = decodeJwt((await run(['token', '--user', 'ada', '--account', 'acme'])).stdout);
      expect(usual.exp! - usual.iat!).toBe(3600);
      const day = decodeJwt(
        (await run(['token', '--user', 'ada', '--account', 'acme', '--ttl', '86400'])).stdout,
      );
      expect(day.exp! - day.iat!).toBe(86_400);
      const refused = await run(['token', '--user', 'ada', '--account', 'acme', '--ttl', '7200'], {
        PLAYBOOK_JWT_MAX_TTL_S: '3600',
      });
      expect(refused).toMatchObject({ code: 2, stdout: '' });
      expect(refused.stderr).toContain('error: --ttl must be at most 3600 seconds (PLAYBOOK_JWT_MAX_TTL_S)');
    });

    it.each([
      ['no --user', ['token', '--account', 'acme']],
      ['no --account', ['token', '--user', 'ada']],
      ['a bad account id', ['token', '--user', 'ada', '--account', 'not an id']],
      ['a ttl of zero', ['token', '--user', 'ada', '--account', 'acme', '--ttl', '0']],
      ['a ttl that is not a number', ['token', '--user', 'ada', '--account', 'acme', '--ttl', '1h']],
      [
        'a ttl past PLAYBOOK_JWT_MAX_TTL_S (D20)',
        ['token', '--user', 'ada', '--account', 'acme', '--ttl', '86401'],
      ],
    ])('exits 2 on bad usage: %s', async (_label, args) => {
      const result = await run(args);
      expect(result.code).toBe(2);
      expect(result.stdout).toBe('');
    });

    it('refuses with one line when a JWKS URL is configured', async () => {
      const result = await run(['token', '--user', 'ada', '--account', 'acme'], {
        PLAYBOOK_JWKS_URL: 'https://id.example/.well-known/jwks.json',
      });
      expect(result.code).toBe(1);
      expect(result.stdout).toBe('');
      expect(result.stderr.trim().split('\n')).toHaveLength(1);
      expect(result.stderr).toMatch(/PLAYBOOK_JWKS_URL/);
    });
  });

  describe('playbook serve', () => {
    it.each([['abc'], ['65536'], ['-1'], ['80.5'], ['']])(
      'exits 2 on bad usage before serving anything: --port %j',
      async (port) => {
        const result = await run(['serve', '--port', port]);
        expect(result.code).toBe(2);
        expect(result.stdout).toBe('');
        expect(result.stderr).toContain('expected a port number, 0-65535');
      },
    );
  });

  describe('playbook keys', () => {
    it("lists an account's keys, one per line, without secrets", async () => {
      // Stored before D21 refused such names: the list shows them escaped, never acted upon.
      const first = await identity.mintKey({
        accountId: 'listed',
        name: 'deploy\tbot\u001b[2J\u202egnp.exe',
      });
      const second = await identity.mintKey({
        accountId: 'listed',
        scopes: ['playbook:read', 'playbook:write'],
      });
      await identity.keys.revoke(second.id);
      const result = await run(['keys', 'list', '--account', 'listed']);
      expect(result.code).toBe(0);
      const lines = result.stdout.trim().split('\n');
      expect(lines[0]).toBe(
        'id\tstatus\tenvironment\tscopes\tcreated\texpires\tlast used\tname\trestrictions',
      );
      const rows = Object.fromEntries(lines.slice(1).map((line) => [line.split('\t')[0], line.split('\t')]));
      expect(rows[first.id]?.slice(1, 4)).toEqual(['active', 'test', 'playbook:read']);
      expect(rows[first.id]?.[7]).toBe('deploy\\u0009bot\\u001b[2J\\u202egnp.exe');
      expect(result.stdout).not.toContain('\u001b');
      expect(result.stdout).not.toContain('\u202e');
      expect(rows[second.id]?.slice(1, 4)).toEqual(['revoked', 'test', 'playbook:read,playbook:write']);
      expect(result.stdout).not.toContain(first.key);
      expect(result.stdout).not.toContain(first.key.split('_')[4]);

      // --json: the API's shape, on one line, the same characters escaped as JSON escapes.
      const json = await run(['keys', 'list', '--account', 'listed', '--json']);
      expect(json).toMatchObject({ code: 0, stderr: '' });
      expect(json.stdout.endsWith('\n')).toBe(true);
      expect(json.stdout.trim()).not.toContain('\n');
      expect(json.stdout).not.toContain('\u001b');
      expect(json.stdout).not.toContain('\u202e');
      expect(json.stdout).toContain('\\u202e');
      expect(JSON.parse(json.stdout)).toEqual(await identity.keys.list('listed'));
      expect(json.stdout).not.toContain(first.key.split('_')[4]);
    });

    it('revokes a key; a running service refuses it within a second', async () => {
      let clock = Date.now();
      const server = createTestIdentity(backend, { options: { now: () => clock } });
      const { key, id } = await identity.mintKey({ accountId: 'acme' });
      await server.verifier.verify(key);

      const result = await run(['keys', 'revoke', id]);
      expect(result).toEqual({ code: 0, stdout: `key ${id} revoked\n`, stderr: '' });
      clock += 1000;
      await expect(server.verifier.verify(key)).rejects.toThrow('the API key has been revoked');
      await server.close();

      expect(await run(['keys', 'revoke', id])).toEqual({
        code: 0,
        stdout: `key ${id} was already revoked\n`,
        stderr: '',
      });
    });

    it('exits 1 for an unknown key and 2 for bad usage', async () => {
      const unknown = await run(['keys', 'revoke', 'NoSuchKey0000000']);
      expect(unknown.code).toBe(1);
      expect(unknown.stderr).toBe('playbook: no API key NoSuchKey0000000\n');
      expect((await run(['keys', 'revoke', 'not-a-key'])).code).toBe(2);
      expect((await run(['keys', 'revoke'])).code).toBe(2);
      expect((await run(['keys', 'list'])).code).toBe(2);
      expect((await run(['keys', 'list', '--account', 'bad id'])).code).toBe(2);
    });
  });

  describe('playbook keys create and roll, as an operator (D29)', () => {
    it('creates a key: the key alone on stdout, once, what it is on stderr; the change log names the operator', async () => {
      const result = await run([
        'keys',
        'create',
        '--account',
        'newcomer',
        '--name',
        'first',
        '--scope',
        'playbook:read',
      ]);
      expect(result.code).toBe(0);
      expect(result.stdout).toMatch(/^svc_sk_test_[A-Za-z0-9]+_[A-Za-z0-9]+\n$/);
      const key = result.stdout.trim();
      const verified = await identity.verifier.verify(key);
      expect(verified).toMatchObject({ accountId: 'newcomer', plan: 'free' });
      expect([...verified.scopes]).toEqual(['playbook:read']);
      expect(result.stderr).toBe(
        `API key ${verified.keyId} created for account newcomer (playbook:read); the key is shown this once: keep it secret\n`,
      );
      const changes = await loggedChanges(backend.databases.primary, 'newcomer');
      expect(changes.map((change) => [change.type, change.target.id, change.actor])).toEqual([
        ['account.created', 'newcomer', { type: 'operator' }],
        ['api_key.created', verified.keyId, { type: 'operator' }],
      ]);
      // Listed like any other key, without its secret.
      const listed = await run(['keys', 'list', '--account', 'newcomer']);
      expect(listed.stdout).toContain(`${verified.keyId}\tactive\ttest\tplaybook:read\t`);
      expect(listed.stdout).not.toContain(key);
    });

    it('--json prints the key with its details; scopes repeat, an expiry with an offset is kept in UTC', async () => {
      const before = Date.now();
      const result = await run([
        'keys',
        'create',
        '--account',
        'newcomer',
        '--name',
        'deploy from CI',
        '--scope',
        'playbook:write',
        '--scope',
        'playbook:read',
        '--scope',
        'playbook:write',
        '--expires-at',
        '2030-01-31T19:00:00+01:00',
        '--json',
      ]);
      expect(result).toMatchObject({ code: 0, stderr: '' });
      expect(result.stdout.trim()).not.toContain('\n');
      const created = JSON.parse(result.stdout);
      expect(created).toEqual({
        id: expect.any(String),
        name: 'deploy from CI',
        accountId: 'newcomer',
        scopes: ['playbook:write', 'playbook:read'],
        environment: 'test',
        createdAt: expect.any(String),
        expiresAt: '2030-01-31T18:00:00.000Z',
        restrictions: null,
        key: expect.stringMatching(/^svc_sk_test_/),
      });
      expect(Date.parse(created.createdAt)).toBeGreaterThanOrEqual(before - 1);
      expect((await identity.verifier.verify(created.key)).keyId).toBe(created.id);
    });

    it('rolls a key: the new key alone on stdout; the old one works for the overlap, then expires', async () => {
      const old = await identity.mintKey({
        accountId: 'roller',
        scopes: ['playbook:read', 'playbook:write'],
      });
      const before = Date.now();
      const result = await run(['keys', 'roll', old.id, '--overlap', '600']);
      const after = Date.now();
      expect(result.code).toBe(0);
      expect(result.stdout).toMatch(/^svc_sk_test_[A-Za-z0-9]+_[A-Za-z0-9]+\n$/);
      const successor = await identity.verifier.verify(result.stdout.trim());
      expect(successor.accountId).toBe('roller');
      expect([...successor.scopes].sort()).toEqual(['playbook:read', 'playbook:write']);
      expect(result.stderr).toBe(
        `API key ${old.id} rolled: ${successor.keyId} replaces it; ${old.id} keeps working for 600 seconds, then expires; the key is shown this once: keep it secret\n`,
      );
      const listed = await identity.keys.list('roller');
      const expiresAt = Date.parse(listed.find((key) => key.id === old.id)!.expiresAt!);
      expect(expiresAt).toBeGreaterThanOrEqual(before + 600_000 - 1);
      expect(expiresAt).toBeLessThanOrEqual(after + 600_000);
      expect(listed.find((key) => key.id === successor.keyId)).toMatchObject({ name: 'test key' });
      // A fresh instance (nothing held) still takes the old key during the overlap.
      const fresh = createTestIdentity(backend);
      await expect(fresh.verifier.verify(old.key)).resolves.toMatchObject({ keyId: old.id });

      // --overlap 0 ends the old key at once; --json gives the successor's details.
      const again = await run(['keys', 'roll', successor.keyId, '--overlap', '0', '--json']);
      expect(again).toMatchObject({ code: 0, stderr: '' });
      const third = JSON.parse(again.stdout);
      expect(third).toMatchObject({ accountId: 'roller', name: 'test key', key: expect.any(String) });
      const current = await fresh.verifier.verify(third.key);
      expect(current.keyId).toBe(third.id);
      const later = createTestIdentity(backend);
      await expect(later.verifier.verify(result.stdout.trim())).rejects.toThrow(/expired/);
      await fresh.close();
      await later.close();

      const changes = await loggedChanges(backend.databases.primary, 'roller');
      expect(
        changes.filter((change) => change.type === 'api_key.rolled').map((change) => change.actor),
      ).toEqual([{ type: 'operator' }, { type: 'operator' }]);
    });

    it('exits 1 with one line when storage refuses: an unknown key, a revoked one', async () => {
      expect(await run(['keys', 'roll', 'NoSuchKey0000000'])).toEqual({
        code: 1,
        stdout: '',
        stderr: 'playbook: no API key NoSuchKey0000000\n',
      });
      const { id } = await identity.mintKey({ accountId: 'roller' });
      await identity.keys.revoke(id);
      const revoked = await run(['keys', 'roll', id]);
      expect(revoked.code).toBe(1);
      expect(revoked.stdout).toBe('');
      expect(revoked.stderr).toBe('playbook: the API key is revoked; create a new key instead\n');
    });

    it.each([
      ['no --account', creating({ '--account': null }), '--account'],
      ['no --name', creating({ '--name': null }), '--name'],
      ['no --scope', creating({ '--scope': null }), '--scope'],
      [
        'an unknown scope',
        creating({ '--scope': 'playbook:admin' }),
        '--scope "playbook:admin" is not a scope (known: playbook:read, playbook:write)',
      ],
      [
        'a bad account id',
        creating({ '--account': 'not an id' }),
        '--account "not an id" is not an account id',
      ],
      [
        'the service namespace as an account',
        creating({ '--account': 'svc' }),
        '--account "svc" is not an account id',
      ],
      ['a blank name', creating({ '--name': '  ' }), '--name must be one line of text, not blank'],
      [
        'a name with a terminal escape',
        creating({ '--name': 'a\u001b[2Jb' }),
        '--name must be one line of text',
      ],
      ['a name too long', creating({ '--name': 'n'.repeat(101) }), '--name must be at most 100 characters'],
      [
        'an expiry that is no date-time',
        creating({ '--expires-at': 'tomorrow' }),
        '--expires-at must be an RFC 3339 date-time',
      ],
      [
        'an expiry without a time zone',
        creating({ '--expires-at': '2030-01-01T00:00:00' }),
        '--expires-at must be an RFC 3339 date-time',
      ],
      [
        'an expiry in the past',
        creating({ '--expires-at': '2020-01-01T00:00:00Z' }),
        '--expires-at must be in the future',
      ],
      ['a roll of a bad key id', ['keys', 'roll', 'not-a-key'], 'is not a key id'],
      ['a roll without a key id', ['keys', 'roll'], "missing required argument 'keyId'"],
      ['a negative overlap', ['keys', 'roll', 'NoSuchKey0000000', '--overlap', '-1'], '--overlap'],
      ['an overlap past a week', ['keys', 'roll', 'NoSuchKey0000000', '--overlap', '604801'], 'a week'],
      ['an overlap in hours', ['keys', 'roll', 'NoSuchKey0000000', '--overlap', '1h'], 'whole seconds'],
    ])('exits 2 on bad usage, storing nothing: %s', async (_label, args, said) => {
      const head = await readHead(backend.databases.primary);
      const result = await run(args);
      expect(result.code).toBe(2);
      expect(result.stdout).toBe('');
      expect(result.stderr).toContain(said);
      expect(await readHead(backend.databases.primary)).toBe(head);
    });
  });

  describe('playbook audit, on storage (D29)', () => {
    it("lists the account's changes newest first, as the audit list shows them, with text from callers escaped", async () => {
      await run(['keys', 'create', '--account', 'audited', '--name', 'one', '--scope', 'playbook:read']);
      // A token's subject is text from an identity provider: printed escaped, never acted upon.
      const user = { subject: 'eve\u001b[2J\u202e', accounts: ['audited'], requestId: 'req-audited-1' };
      const created = await identity.keys.createFor(user, {
        name: 'two',
        accountId: 'audited',
        scopes: ['playbook:read'],
      });
      await run(['keys', 'revoke', created.id]);
      await identity.mintKey({ accountId: 'elsewhere' });

      const listed = (await identity.audit.listFor({ accounts: ['audited'] }, 'audited')).data;
      expect(listed.map((event) => event.action)).toEqual([
        'api_key.revoked',
        'api_key.created',
        'api_key.created',
        'account.created',
      ]);

      const text = await run(['audit', '--account', 'audited']);
      expect(text).toMatchObject({ code: 0, stderr: '' });
      const lines = text.stdout.trim().split('\n');
      expect(lines[0]).toBe('at\taction\tactor\ttarget\trequest\tsummary');
      expect(lines.slice(1).map((line) => line.split('\t'))).toEqual(
        listed
          .map((event) => [
            event.at,
            event.action,
            event.actor.id === undefined ? event.actor.type : `${event.actor.type}:${event.actor.id}`,
            event.target,
            event.requestId ?? '-',
            event.summary,
          ])
          .map((fields) =>
            fields.map((field) => field.replace('\u001b', '\\u001b').replace('\u202e', '\\u202e')),
          ),
      );
      expect(lines[2]).toContain('\tuser:eve\\u001b[2J\\u202e\t');
      expect(text.stdout).not.toContain('\u001b');
      expect(text.stdout).not.toContain('\u202e');

      const json = await run(['audit', '--account', 'audited', '--json']);
      expect(json).toMatchObject({ code: 0, stderr: '' });
      expect(json.stdout).not.toContain('\u001b');
      expect(json.stdout).not.toContain('\u202e');
      const events = json.stdout
        .trim()
        .split('\n')
        .map((line) => JSON.parse(line));
      expect(events).toEqual(listed);
    });

    it("reads the account's changes by their place in the log, batch after batch, in either direction", async () => {
      for (let i = 0; i < 6; i++) await identity.mintKey({ accountId: 'busy', name: `key ${i}` });
      await identity.mintKey({ accountId: 'elsewhere' });
      await identity.mintKey({ accountId: 'busy', name: 'last' });
      const listed = (await identity.audit.listFor({ accounts: ['busy'] }, 'busy', { pageSize: 100 })).data;
      expect(listed).toHaveLength(8);
      // Batches of 3, as the command reads them in batches of 500.
      const newest: string[] = [];
      let before: number | undefined;
      for (;;) {
        const batch = await identity.audit.newestBefore('busy', before, 3);
        newest.push(...batch.map((logged) => logged.event.id));
        if (batch.length < 3) break;
        before = batch.at(-1)!.seq;
      }
      expect(newest).toEqual(listed.map((event) => event.id));
      const oldest: string[] = [];
      let after = 0;
      for (;;) {
        const batch = await identity.audit.oldestAfter('busy', after, 3);
        oldest.push(...batch.map((logged) => logged.event.id));
        if (batch.length < 3) break;
        after = batch.at(-1)!.seq;
      }
      expect(oldest).toEqual(listed.map((event) => event.id).reverse());

      const json = await run(['audit', '--account', 'busy', '--json']);
      expect(
        json.stdout
          .trim()
          .split('\n')
          .map((line) => JSON.parse(line)),
      ).toEqual(listed);
    });

    it('prints only the header (or nothing, as JSON) for an account without changes', async () => {
      expect(await run(['audit', '--account', 'quiet'])).toEqual({
        code: 0,
        stdout: 'at\taction\tactor\ttarget\trequest\tsummary\n',
        stderr: '',
      });
      expect(await run(['audit', '--account', 'quiet', '--json'])).toEqual({
        code: 0,
        stdout: '',
        stderr: '',
      });
    });

    it.each([
      ['no --account', ['audit']],
      ['a bad account id', ['audit', '--account', 'bad id']],
      ['an unknown option', ['audit', '--account', 'acme', '--since', 'yesterday']],
    ])('exits 2 on bad usage: %s', async (_label, args) => {
      const result = await run(args);
      expect(result.code).toBe(2);
      expect(result.stdout).toBe('');
    });
  });

  describe('help', () => {
    it('no command’s help cites a decision number, and each new command is described (D29)', () => {
      const out = new Capture();
      const program = buildProgram(createContext(backend.env, { stdout: out, stderr: out }));
      const commands: Command[] = [];
      const walk = (command: Command) => {
        commands.push(command);
        command.commands.forEach(walk);
      };
      walk(program);
      for (const command of commands) {
        out.text = '';
        command.outputHelp();
        expect(out.text, command.name()).not.toMatch(/\bD\d{1,2}\b/);
      }
      const names = commands.map((command) =>
        command.parent?.parent ? `${command.parent.name()} ${command.name()}` : command.name(),
      );
      expect(names).toEqual(
        expect.arrayContaining([
          'keys create',
          'keys roll',
          'keys revoke',
          'keys list',
          'keys scan',
          'audit',
        ]),
      );
    });
  });

  describe('playbook keys scan (D22)', () => {
    const real = composeApiKey('test', 'Kq3ZkQwPq0LmT2Ab', 'a'.repeat(33));
    const live = composeApiKey('live', 'LvZkQwPq0LmT2Ab9', 'b'.repeat(33));
    const lookAlike = `${real.slice(0, -1)}${real.endsWith('A') ? 'B' : 'A'}`;
    let dir: string;

    beforeAll(async () => {
      dir = await fs.mkdtemp(path.join(backend.workDir, 'scan-'));
      const files: Record<string, string | Buffer> = {
        'app/.env': `# settings\nPORT=8080\n  PLAYBOOK_KEY=${real}\n`,
        'app/docs.md': `Keys look like ${lookAlike}; svc_sk_test_short_x is not one.\n`,
        'app/deep/nested/config.json': JSON.stringify({ key: live }),
        'app/clean.txt': 'nothing here\n',
        'app/node_modules/pkg/index.js': `const k = "${real}";`,
        'app/.git/objects/blob': real,
        'app/glued.txt': `x${real} ${real}9 prefix_${real}`,
        'bin/image.bin': Buffer.concat([Buffer.from([0, 255, 1, 2]), Buffer.from(real), Buffer.from([0])]),
      };
      for (const [name, content] of Object.entries(files)) {
        await fs.mkdir(path.dirname(path.join(dir, name)), { recursive: true });
        await fs.writeFile(path.join(dir, name), content);
      }
    });

    it('exits 1 naming where each well-formed key is, by id, never printing a secret', async () => {
      const result = await run(['keys', 'scan', path.join(dir, 'app'), path.join(dir, 'bin/image.bin')]);
      expect(result.code).toBe(1);
      expect(result.stdout).toBe(
        [
          `${path.join(dir, 'app/.env')}:3:16: test API key Kq3ZkQwPq0LmT2Ab (checksum holds)`,
          `${path.join(dir, 'app/deep/nested/config.json')}:1:9: live API key LvZkQwPq0LmT2Ab9 (checksum holds)`,
          `${path.join(dir, 'bin/image.bin')}:1:5: test API key Kq3ZkQwPq0LmT2Ab (checksum holds)`,
          '',
        ].join('\n'),
      );
      expect(result.stderr).toBe(
        'playbook: found 3 API keys; 2 look-alikes with a failing checksum ignored: revoke them (or roll) and remove them from the files\n',
      );
      for (const secret of [real, live].map((key) => key.split('_')[4]!)) {
        expect(result.stdout + result.stderr).not.toContain(secret);
      }
    });

    it('exits 0 when there is none, and 2 for a path that does not exist', async () => {
      expect(
        await run(['keys', 'scan', path.join(dir, 'app/clean.txt'), path.join(dir, 'app/docs.md')]),
      ).toEqual({
        code: 0,
        stdout: 'no API keys found; 1 look-alike with a failing checksum ignored\n',
        stderr: '',
      });
      const missing = await run(['keys', 'scan', path.join(dir, 'nowhere')]);
      expect(missing.code).toBe(2);
      expect(missing.stderr).toContain('does not exist');
      expect((await run(['keys', 'scan'])).code).toBe(2);
    });
  });
});

describe('where a command writes its log lines', () => {
  let backend: TestBackend;
  beforeAll(async () => {
    backend = await createTestBackend();
  });
  afterAll(async () => {
    await backend.cleanup();
  });

  it('a command other than serve logs on stderr: stdout holds only what it prints, the new key', async () => {
    // A Redis that does not answer makes the command log warnings while it creates the key.
    const cli = spawnCli(
      ['keys', 'create', '--account', 'acme', '--name', 'logs', '--scope', 'playbook:read'],
      {
        ...backend.env,
        PLAYBOOK_REDIS_URL: 'redis://127.0.0.1:1',
      },
    );
    const { code } = await cli.exited;
    expect(code).toBe(0);
    expect(cli.stdout()).toMatch(/^svc_sk_test_[A-Za-z0-9]+_[A-Za-z0-9]+\n$/);
    const logLines = cli
      .stderr()
      .split('\n')
      .filter((line) => line.startsWith('{'));
    expect(logLines.length).toBeGreaterThan(0);
    expect(logLines.some((line) => (JSON.parse(line) as { level: number }).level === 40)).toBe(true);
  });
});
