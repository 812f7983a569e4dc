import type { FastifyInstance } from 'fastify';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { listenLocally } from '../helpers/app.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { type CliProcess, spawnCli } from '../helpers/cli.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';

/**
 * D29: `playbook audit --follow` as a process of its own (`node dist/cli/main.js`; run `npm run build`
 * first): the existing changes oldest first, then each write made after it started, until SIGINT or
 * SIGTERM, which end it with exit 0.
 */
describe('playbook audit --follow (D29)', () => {
  let backend: TestBackend;
  let identity: TestIdentity;
  let app: FastifyInstance;
  let baseUrl: string;
  const running: CliProcess[] = [];

  beforeAll(async () => {
    backend = await createTestBackend();
    identity = createTestIdentity(backend);
    app = await buildIdentityApp(backend, identity);
    baseUrl = await listenLocally(app);
  });
  afterEach(() => {
    for (const cli of running.splice(0)) cli.child.kill('SIGKILL');
  });
  afterAll(async () => {
    await app.close();
    await identity.close();
    await backend.cleanup();
  });

  function follow(args: string[], env: Record<string, string> = {}): CliProcess {
    const cli = spawnCli(['audit', '--follow', ...args], { ...backend.env, ...env });
    running.push(cli);
    return cli;
  }

  const jsonLines = (text: string) =>
    text
      .trim()
      .split('\n')
      .filter((line) => line !== '')
      .map((line) => JSON.parse(line) as { action: string; target: string; actor: { type: string } });

  it.each([['SIGTERM'], ['SIGINT']] as const)(
    'on storage: prints what exists oldest first, then a write made after it started; %s ends it with exit 0',
    async (signal) => {
      const account = `followed-${signal.toLowerCase()}`;
      const first = await identity.mintKey({ accountId: account });
      const cli = follow(['--account', account, '--json']);
      const existing = jsonLines(await cli.waitFor((out) => jsonLines(out).length >= 2));
      expect(existing.map((event) => [event.action, event.target])).toEqual([
        ['account.created', `account:${account}`],
        ['api_key.created', `api-key:${first.id}`],
      ]);

      // A write of another process (this one) after the follower started, and one of another account.
      await identity.mintKey({ accountId: 'someone-else' });
      const writtenAt = Date.now();
      await identity.keys.revoke(first.id);
      const seen = jsonLines(await cli.waitFor((out) => jsonLines(out).length >= 3, 5000));
      const latency = Date.now() - writtenAt;
      expect(seen.slice(2).map((event) => [event.action, event.target, event.actor.type])).toEqual([
        ['api_key.revoked', `api-key:${first.id}`, 'operator'],
      ]);
      // The log is read every half second.
      expect(latency).toBeLessThan(2000);

      cli.child.kill(signal);
      expect(await cli.exited).toEqual({ code: 0, signal: null });
      expect(cli.stderr()).toBe('');
      expect(jsonLines(cli.stdout())).toHaveLength(3);
    },
  );

  it('through a running service: prints what exists oldest first, then a write made after it started; SIGINT ends it with exit 0', async () => {
    const account = 'followed-remote';
    const headers = await identity.tokenHeaders({ user: 'ada', accounts: [account] });
    const create = (name: string) =>
      app.inject({
        method: 'POST',
        url: '/v3/identity/api-keys',
        headers,
        payload: { name, accountId: account, scopes: ['playbook:read'] },
      });
    expect((await create('before')).statusCode).toBe(201);
    const token = headers.authorization!.slice('Bearer '.length);
    const cli = follow(['--account', account], { PLAYBOOK_URL: baseUrl, PLAYBOOK_ACCESS_TOKEN: token });
    const lines = (text: string) => text.trim().split('\n');
    const before = lines(await cli.waitFor((out) => lines(out).length >= 3));
    expect(before[0]).toBe('at\taction\tactor\ttarget\trequest\tsummary');
    expect(before.slice(1).map((line) => line.split('\t').slice(1, 3))).toEqual([
      ['account.created', 'user:ada'],
      ['api_key.created', 'user:ada'],
    ]);

    const created = await create('after');
    expect(created.statusCode).toBe(201);
    const writtenAt = Date.now();
    const after = lines(await cli.waitFor((out) => lines(out).length >= 4, 8000));
    // The audit list is asked every two seconds.
    expect(Date.now() - writtenAt).toBeLessThan(4000);
    expect(after[3]?.split('\t').slice(1, 4)).toEqual([
      'api_key.created',
      'user:ada',
      `api-key:${created.json().id}`,
    ]);

    cli.child.kill('SIGINT');
    expect(await cli.exited).toEqual({ code: 0, signal: null });
    expect(cli.stderr()).toBe('');
    expect(lines(cli.stdout())).toHaveLength(4);
  });

  it('exits 1 with the problem when the service refuses, before following anything', async () => {
    const token = await identity.mintToken({ accounts: ['someone'] });
    const cli = follow(['--account', 'not-theirs'], { PLAYBOOK_URL: baseUrl, PLAYBOOK_ACCESS_TOKEN: token });
    expect(await cli.exited).toEqual({ code: 1, signal: null });
    expect(cli.stderr()).toMatch(/^playbook: audit failed: 403 forbidden: .+\n$/);
  });
});
