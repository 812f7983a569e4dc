import fs from 'node:fs/promises';
import path from 'node:path';
import { Writable } from 'node:stream';
import { decodeJwt } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEV_KEY_FILE } from '../../src/auth/dev-signer.js';
import { main } from '../../src/cli/program.js';
import { composeApiKey } from '../../src/schemas/api-key-format.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { createTestIdentity, type TestIdentity } from '../helpers/credentials.js';

class Capture extends Writable {
  text = '';
  override _write(chunk: Buffer, _encoding: string, done: () => void): void {
    this.text += chunk.toString('utf8');
    done();
  }
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

  async function run(args: string[], env: Record<string, string> = {}) {
    const stdout = new Capture();
    const stderr = new Capture();
    const code = await main(['node', 'playbook', ...args], { ...backend.env, ...env }, { stdout, stderr });
    return { code, stdout: stdout.text, stderr: stderr.text };
  }

  describe('playbook token', () => {
    it('prints only a token the service accepts, signed with a key made in the data directory', async () => {
      const result = await run(['token', '--user', 'ada', '--account', 'acme', '--account', 'globex']);
      expect(result).toMatchObject({ code: 0, stderr: '' });
      expect(result.stdout).toMatch(/^[\w-]+\.[\w-]+\.[\w-]+\n$/);
      const verified = await identity.tokens.verify(result.stdout.trim());
      expect(verified).toEqual({ subject: 'ada', accounts: ['acme', 'globex'] });
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
      expect(lines[0]).toBe('id\tstatus\tenvironment\tscopes\tcreated\texpires\tlast used\tname');
      const rows = Object.fromEntries(lines.slice(1).map((line) => [line.split('\t')[0], line.split('\t')]));
      expect(rows[first.id]?.slice(1, 4)).toEqual(['active', 'test', 'playbook:read']);
      expect(rows[first.id]?.[7]).toBe('deploy\\u0009bot\\u001b[2J\\u202egnp.exe');
      expect(result.stdout).not.toContain('\u001b');
      expect(result.stdout).not.toContain('\u202e');
      expect(rows[second.id]?.slice(1, 4)).toEqual(['revoked', 'test', 'playbook:read,playbook:write']);
      expect(result.stdout).not.toContain(first.key);
      expect(result.stdout).not.toContain(first.key.split('_')[4]);
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
