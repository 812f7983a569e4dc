import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { usageChart } from '../../src/cli/key-restrictions.js';
import { listenLocally } from '../helpers/app.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { runCli } from '../helpers/cli.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { givenAccount } from '../helpers/fixtures.js';

/**
 * D32 on the command line: `keys create --catalog --allow-ip --rate`, `keys restrict`, `keys usage`
 * with its chart, on the storage as an operator and through the running service as a user.
 */
describe('playbook keys: restrictions and usage (D32)', () => {
  let backend: TestBackend;
  let identity: TestIdentity;
  let app: FastifyInstance;
  let remote: Record<string, string>;

  beforeAll(async () => {
    backend = await createTestBackend();
    await givenAccount(backend.databases.primary, 'acme');
    identity = createTestIdentity(backend);
    app = await buildIdentityApp(backend, identity);
    const baseUrl = await listenLocally(app);
    const token = await identity.mintToken({ user: 'ada', accounts: ['acme'] });
    remote = { ...backend.env, PLAYBOOK_URL: baseUrl, PLAYBOOK_ACCESS_TOKEN: token };
  });
  afterAll(async () => {
    await app.close();
    await identity.close();
    await backend.cleanup();
  });

  const local = (args: string[]) => runCli(args, backend.env);
  const viaService = (args: string[]) => runCli(args, remote);
  const CREATE = ['keys', 'create', '--account', 'acme', '--name', 'ci', '--scope', 'playbook:read'];

  for (const [where, run] of [
    ['on the storage', local],
    ['through the service', viaService],
  ] as const) {
    it(`creates a restricted key, changes and lifts its restrictions, and lists them (${where})`, async () => {
      const created = await run([
        ...CREATE,
        '--catalog',
        'org/runbooks',
        '--catalog',
        'svc/*',
        '--allow-ip',
        '10.1.2.3/8',
        '--rate',
        '100/1m',
        '--json',
      ]);
      expect(created.code, created.stderr).toBe(0);
      const key = JSON.parse(created.stdout) as { id: string; restrictions: unknown };
      expect(key.restrictions).toEqual({
        catalogs: ['org/runbooks', 'svc/*'],
        allowedIps: ['10.0.0.0/8'],
        rateLimit: { limit: 100, windowSeconds: 60 },
      });

      const restricted = await run([
        'keys',
        'restrict',
        key.id,
        '--allow-ip',
        '192.0.2.0/24',
        '--lift',
        'rate',
      ]);
      expect(restricted).toMatchObject({
        code: 0,
        stdout: `key ${key.id} restrictions: catalogs org/runbooks,svc/*; addresses 192.0.2.0/24\n`,
      });
      const listed = await run(['keys', 'list', '--account', 'acme']);
      const lines = listed.stdout.trim().split('\n');
      expect(lines[0]?.split('\t').at(-1)).toBe('restrictions');
      const row = lines.find((line) => line.startsWith(key.id))!.split('\t');
      expect(row.at(-1)).toBe('catalogs org/runbooks,svc/*; addresses 192.0.2.0/24');

      const lifted = await run(['keys', 'restrict', key.id, '--lift', 'all']);
      expect(lifted).toMatchObject({ code: 0, stdout: `key ${key.id} restrictions: none\n` });
    });

    it(`keys usage draws requests per day by outcome, or prints the API's answer (${where})`, async () => {
      const made = await identity.mintKey({ accountId: 'acme' });
      for (let i = 0; i < 3; i++) await app.inject({ url: '/v3/playbook/catalogs', headers: made.headers });
      await app.inject({ url: '/v3/playbook/catalogs?page=0', headers: made.headers });
      // What the running service counted reaches storage with its next flush.
      await identity.usage.flush();
      const chart = await run(['keys', 'usage', made.id]);
      expect(chart.code, chart.stderr).toBe(0);
      const lines = chart.stdout.trim().split('\n');
      expect(lines[0]).toBe(
        `API key ${made.id}: requests per day (counts: success/client error/unauthorized/rate limited/server error)`,
      );
      expect(lines).toHaveLength(1 + 7 + 2);
      const today = lines[7]!;
      expect(today.startsWith(new Date().toISOString().slice(0, 10))).toBe(true);
      expect(today).toMatch(/█+▓+\s+4 {2}3\/1\/0\/0\/0$/);
      expect(lines[8]).toBe('█ success  ▓ client error  ▒ unauthorized  ░ rate limited  × server error');
      expect(lines[9]).toMatch(/^last used \S+ from /);

      const json = await run(['keys', 'usage', made.id, '--hourly', '--json']);
      expect(json.code).toBe(0);
      const usage = JSON.parse(json.stdout) as { granularity: string; buckets: unknown[] };
      expect(usage.granularity).toBe('hour');
      expect(usage.buckets).toHaveLength(168);
    });

    it(`refuses bad input naming the flag, and writes nothing (${where})`, async () => {
      for (const [args, said] of [
        [[...CREATE, '--rate', 'fast'], /--rate/],
        [[...CREATE, '--rate', '0/60s'], /--rate|rateLimit/],
        [[...CREATE, '--catalog', 'acme'], /--catalog/],
        [[...CREATE, '--allow-ip', '10.0.0.0/33'], /--allow-ip|allowedIps/],
        [[...CREATE, '--rate', '100000/1s'], /rateLimit/],
        [['keys', 'restrict', 'AbCdEfGh12345678'], /give --catalog, --allow-ip, --rate or --lift/],
        [
          ['keys', 'restrict', 'AbCdEfGh12345678', '--lift', 'all', '--rate', '1/1s'],
          /--lift all stands alone/,
        ],
        [['keys', 'restrict', 'AbCdEfGh12345678', '--lift', 'scopes'], /--lift/],
        [['keys', 'usage', 'AbCdEfGh12345678', '--from', 'yesterday'], /--from/],
      ] as const) {
        const before = await identity.keys.list('acme');
        const result = await run([...args]);
        expect(result.code, args.join(' ')).not.toBe(0);
        expect(result.stderr, args.join(' ')).toMatch(said);
        expect(await identity.keys.list('acme')).toEqual(before);
      }
      const unknown = await run(['keys', 'usage', 'AbCdEfGh12345678']);
      expect(unknown.code).toBe(1);
    });
  }
});

describe('the usage chart', () => {
  it('scales bars to the busiest bucket, shows every outcome that happened, and says when never used', () => {
    const bucket = (start: string, counts: Partial<Record<string, number>>) => ({
      start,
      success: 0,
      clientError: 0,
      unauthorized: 0,
      rateLimited: 0,
      serverError: 0,
      ...counts,
    });
    const chart = usageChart({
      keyId: 'AbCdEfGh12345678',
      granularity: 'day',
      buckets: [
        bucket('2031-07-14T00:00:00.000Z', {}),
        bucket('2031-07-15T00:00:00.000Z', { success: 400, serverError: 1 }),
        bucket('2031-07-16T00:00:00.000Z', { success: 100, unauthorized: 100 }),
      ],
      lastUsed: null,
    }).split('\n');
    expect(chart[1]).toMatch(/^2031-07-14 {2}\s+0 {2}0\/0\/0\/0\/0$/);
    expect(chart[2]).toMatch(/^2031-07-15 {2}█{40}× +401 {2}400\/0\/0\/0\/1$/);
    expect(chart[3]).toMatch(/^2031-07-16 {2}█{10}▒{10} +200 {2}100\/0\/100\/0\/0$/);
    expect(chart[5]).toBe('never used');
  });
});
