import path from 'node:path';
import type { FastifyInstance } from 'fastify';
import {
  afterAll,
  afterEach,
  beforeAll,
  beforeEach,
  describe,
  expect,
  it,
  type MockInstance,
  vi,
} from 'vitest';
import { listenLocally } from '../helpers/app.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { runCli } from '../helpers/cli.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { givenAccount } from '../helpers/fixtures.js';
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.js';
import { catalogJson, newTreeDir, resourceJson, writeTree } from '../import/support.js';

/**
 * D14 amended: a command that sends a key or a token sends it over plain HTTP to a loopback host
 * only, judged by the URL's text (`.invalid` never resolves: a refusal comes before any lookup);
 * beyond loopback it needs `--insecure-http`, which warns on stderr.
 */
describe('credentials stay off plain HTTP on the command line (D14)', () => {
  const INVALID = 'http://playbook.invalid';
  let backend: TestBackend;
  let identity: TestIdentity;
  let app: FastifyInstance;
  let port: string;
  let relays: TcpProxy[];
  let env: Record<string, string>;
  let folder: string;
  let fetches: MockInstance<typeof fetch>;

  /** Every command that sends a key or a token, and whether it takes `--url` (`get` reads PLAYBOOK_URL). */
  const credentialed: [string, () => string[], boolean][] = [
    [
      'keys create',
      () => ['keys', 'create', '--account', 'acme', '--name', 'n', '--scope', 'playbook:read'],
      true,
    ],
    ['keys roll', () => ['keys', 'roll', 'AAAAAAAAAAAAAAAA'], true],
    ['keys revoke', () => ['keys', 'revoke', 'AAAAAAAAAAAAAAAA'], true],
    ['keys list', () => ['keys', 'list', '--account', 'acme'], true],
    ['audit', () => ['audit', '--account', 'acme'], true],
    ['webhooks list', () => ['webhooks', 'list', '--account', 'acme'], true],
    [
      'webhooks create',
      () => ['webhooks', 'create', '--account', 'acme', '--endpoint', 'https://hooks.example.com/in'],
      true,
    ],
    ['webhooks test', () => ['webhooks', 'test', '0190c2a4-0000-7000-8000-000000000000'], true],
    ['webhooks deliveries', () => ['webhooks', 'deliveries', '0190c2a4-0000-7000-8000-000000000000'], true],
    ['get', () => ['get', 'svc/handbook'], false],
    ['pull', () => ['pull', 'svc/handbook', path.join(backend.workDir, 'pulled')], true],
    ['publish', () => ['publish', folder], true],
  ];

  beforeAll(async () => {
    backend = await createTestBackend();
    identity = createTestIdentity(backend);
    app = await buildIdentityApp(backend, identity);
    const baseUrl = await listenLocally(app);
    port = new URL(baseUrl).port;
    // The service reached by two other loopback addresses of the machine.
    relays = [
      await startTcpProxy({ host: '127.0.0.1', port: Number(port) }, '127.0.0.2'),
      await startTcpProxy({ host: '127.0.0.1', port: Number(port) }, '::1'),
    ];
    await givenAccount(backend.databases.primary, 'acme');
    const { key } = await identity.mintKey({
      accountId: 'acme',
      scopes: ['playbook:read', 'playbook:write'],
    });
    const token = await identity.mintToken({ user: 'ada', accounts: ['acme'] });
    env = { ...backend.env, PLAYBOOK_API_KEY: key, PLAYBOOK_ACCESS_TOKEN: token };
    const tree = await newTreeDir(backend);
    await writeTree(tree, {
      'handbook/catalog.json': catalogJson({ version: '1' }),
      'handbook/resources/intro.json': resourceJson({ title: 'Intro', content: '# Intro\n' }),
    });
    folder = path.join(tree, 'handbook');
  });
  beforeEach(() => {
    // Node's fetch, watched: what the client library sends goes through it.
    fetches = vi.spyOn(globalThis, 'fetch');
  });
  afterEach(() => {
    fetches.mockRestore();
  });
  afterAll(async () => {
    for (const relay of relays) await relay.close();
    await app.close();
    await identity.close();
    await backend.cleanup();
  });

  const sentTo = () => fetches.mock.calls.map(([input]) => String(input));

  describe.each(credentialed)('%s', (_name, args, takesUrl) => {
    it('is refused for http:// to a host that is not loopback, before anything is sent (exit 2)', async () => {
      // The service given by PLAYBOOK_URL, and by --url where the command takes it.
      const given: ['PLAYBOOK_URL' | '--url', string[], Record<string, string>][] = [
        ['PLAYBOOK_URL', [], { PLAYBOOK_URL: INVALID }],
        ...(takesUrl
          ? [['--url', ['--url', INVALID], {}] as ['--url', string[], Record<string, string>]]
          : []),
      ];
      for (const [from, flags, variables] of given) {
        const result = await runCli([...args(), ...flags], { ...env, ...variables });
        expect(result.code, from).toBe(2);
        expect(result.stdout, from).toBe('');
        expect(result.stderr, from).toMatch(
          new RegExp(
            `^error: ${from} is plain http to playbook\\.invalid, which is not loopback: the key or token would cross the network readable by anyone on the way; use https://, or give --insecure-http to send it anyway\\n`,
          ),
        );
      }
      expect(sentTo()).toEqual([]);
    });

    it('with --insecure-http, warns and goes on: the failure is the connection’s, not a refusal', async () => {
      const result = await runCli([...args(), '--insecure-http'], { ...env, PLAYBOOK_URL: INVALID });
      expect(result.code).toBe(1);
      expect(result.stdout).not.toContain('svc_sk_');
      const [warning, ...rest] = result.stderr.split('\n');
      expect(warning).toBe(
        'playbook: warning: --insecure-http: the key or token goes to http://playbook.invalid over plain http, readable by anyone on the way',
      );
      expect(rest.join('\n')).toMatch(/network_error: the request did not reach the service/);
      expect(result.stderr).not.toContain('not loopback');
      // It was sent, with the credential the command carries.
      expect(sentTo().length).toBeGreaterThan(0);
      expect(sentTo().every((url) => url.startsWith(`${INVALID}/v3/`))).toBe(true);
      const headers = new Headers(fetches.mock.calls[0]![1]?.headers);
      expect(headers.has('x-api-key') || headers.has('authorization')).toBe(true);
      for (const secret of [env.PLAYBOOK_API_KEY!, env.PLAYBOOK_ACCESS_TOKEN!]) {
        expect(result.stderr).not.toContain(secret);
      }
    }, 30_000);
  });

  it('is allowed without a flag to loopback hosts by their text: localhost, 127.0.0.0/8, [::1]', async () => {
    for (const url of [
      `http://localhost:${port}`,
      `http://127.0.0.1:${port}`,
      relays[0]!.via(`http://127.0.0.1:${port}`),
      relays[1]!.via(`http://127.0.0.1:${port}`),
    ]) {
      const listed = await runCli(['keys', 'list', '--account', 'acme', '--url', url], env);
      expect(listed, url).toMatchObject({ code: 0, stderr: '' });
      expect(listed.stdout, url).toMatch(/^id\tstatus\t/);
      const read = await runCli(['get', 'svc/nothing-here'], { ...env, PLAYBOOK_URL: url });
      expect(read.stderr, url).toMatch(/^playbook: get failed: 404 not_found: /);
    }
    expect(relays[0]!.via(`http://127.0.0.1:${port}`)).toMatch(/^http:\/\/127\.0\.0\.2:/);
    expect(relays[1]!.via(`http://127.0.0.1:${port}`)).toMatch(/^http:\/\/\[::1\]:/);
  });

  it('is allowed without a flag to a name under .localhost, which is never looked up to decide', async () => {
    // Whether the name resolves depends on the machine; that it is not refused does not.
    const result = await runCli(
      ['keys', 'list', '--account', 'acme', '--url', `http://playbook.localhost:${port}`],
      env,
    );
    expect(result.stderr).not.toMatch(/not loopback|warning/);
    if (result.code !== 0) {
      expect(result.code).toBe(1);
      expect(result.stderr).toMatch(/network_error/);
    }
    expect(sentTo()[0]).toMatch(new RegExp(`^http://playbook\\.localhost:${port}/v3/identity/api-keys`));
  }, 30_000);

  it('https is never refused, and --insecure-http says nothing where it changes nothing', async () => {
    const result = await runCli(
      ['keys', 'list', '--account', 'acme', '--url', 'https://playbook.invalid', '--insecure-http'],
      env,
    );
    expect(result.code).toBe(1);
    expect(result.stderr).not.toMatch(/not loopback|warning/);
    expect(result.stderr).toMatch(/network_error/);
    const local = await runCli(
      ['keys', 'list', '--account', 'acme', '--url', `http://127.0.0.1:${port}`, '--insecure-http'],
      env,
    );
    expect(local).toMatchObject({ code: 0, stderr: '' });
  }, 30_000);
});
