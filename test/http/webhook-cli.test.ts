import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { main } from '../../src/cli/program.js';
import { listenLocally } from '../helpers/app.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { waitFor } from '../helpers/wait.js';
import { Receiver, startWebhookInstance, type WebhookInstance } from '../helpers/webhooks.js';

/** D28: `playbook webhooks list|create|test|deliveries` against a running service, as a user. */

class Capture extends Writable {
  text = '';
  override _write(chunk: Buffer, _encoding: string, done: () => void): void {
    this.text += chunk.toString('utf8');
    done();
  }
}

describe('playbook webhooks (D28)', () => {
  let backend: TestBackend;
  let instance: WebhookInstance;
  let receiver: Receiver;
  let env: Record<string, string>;

  beforeAll(async () => {
    backend = await createTestBackend();
    instance = await startWebhookInstance(backend);
    receiver = await Receiver.start();
    const url = await listenLocally(instance.app);
    const token = await instance.services.identity.signer!.mint({
      subject: 'ada',
      accounts: ['acme'],
      ttlSeconds: 3600,
    });
    env = { ...backend.env, PLAYBOOK_URL: url, PLAYBOOK_ACCESS_TOKEN: token };
  });
  afterAll(async () => {
    await instance?.close();
    await receiver?.close();
    await backend?.cleanup();
  });

  async function run(args: string[], runEnv = env) {
    const stdout = new Capture();
    const stderr = new Capture();
    const code = await main(['node', 'playbook', 'webhooks', ...args], runEnv, { stdout, stderr });
    return { code, stdout: stdout.text, stderr: stderr.text };
  }

  it('create prints the id and the secret once; list, test and deliveries show the endpoint and its attempts', async () => {
    const created = await run([
      'create',
      '--account',
      'acme',
      '--endpoint',
      receiver.url('/cli'),
      '--events',
      'catalog.created,resource.created',
      '--description',
      'from the command line',
    ]);
    expect(created.code, created.stderr).toBe(0);
    const fields = Object.fromEntries(
      created.stdout
        .trim()
        .split('\n')
        .map((line) => line.split('\t')),
    );
    expect(fields.secret).toMatch(/^whsec_/);
    expect(fields.events).toBe('catalog.created,resource.created');
    expect(created.stderr).toMatch(/never shown again/);

    const listed = await run(['list', '--account', 'acme']);
    expect(listed.code).toBe(0);
    expect(listed.stdout).toContain(fields.id);
    expect(listed.stdout).toContain('from the command line');
    expect(listed.stdout).not.toContain(fields.secret);

    const tested = await run(['test', fields.id]);
    expect(tested.code, tested.stderr).toBe(0);
    expect(tested.stdout).toMatch(/^delivery\t/m);
    await waitFor('the test event', () => receiver.at('/cli').length === 1);

    await waitFor('the attempt listed', async () =>
      (await run(['deliveries', fields.id])).stdout.includes('webhook.test'),
    );
    const deliveries = await run(['deliveries', fields.id]);
    const [header, row] = deliveries.stdout.trim().split('\n');
    expect(header!.split('\t')).toEqual([
      'at',
      'event',
      'type',
      'attempt',
      'outcome',
      'status',
      'ms',
      'next attempt',
      'error',
      'delivery',
    ]);
    expect(row!.split('\t').slice(2, 6)).toEqual(['webhook.test', '1', 'succeeded', '204']);
  });

  it('refusals exit 1 with one line; a missing token or service URL is bad usage (exit 2)', async () => {
    const refused = await run(['create', '--account', 'acme', '--endpoint', 'ftp://x.example.com/']);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/creating the webhook endpoint failed: .*400/);
    expect(refused.stderr.trim().split('\n')).toHaveLength(1);
    const { PLAYBOOK_ACCESS_TOKEN: _token, ...noToken } = env;
    expect((await run(['list', '--account', 'acme'], noToken)).code).toBe(2);
    const { PLAYBOOK_URL: _url, ...noUrl } = env;
    expect((await run(['list', '--account', 'acme'], noUrl)).code).toBe(2);
    expect((await run(['list', '--account', 'not an account'])).code).toBe(2);
    const other = await run(['test', '0190c2a4-0000-7000-8000-000000000000']);
    expect(other.code).toBe(1);
    expect(other.stderr).toMatch(/404/);
  });
});
