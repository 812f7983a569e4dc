import { type ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { freePort } from '../helpers/servers.js';
import { waitFor } from '../helpers/wait.js';
import { startWebhookInstance, userHeaders, type WebhookInstance } from '../helpers/webhooks.js';

/**
 * D28: the webhooks guide (docs/guides/webhooks.md) shows examples/webhook-receiver.mjs as it is, and that
 * receiver, run as a user would run it, verifies and prints the service's deliveries, handles a
 * repeated one once, and refuses a forged one.
 */

const ROOT = path.resolve(import.meta.dirname, '../..');
const EXAMPLE = path.join(ROOT, 'examples/webhook-receiver.mjs');

describe('the webhooks guide and its receiver (D28)', () => {
  let backend: TestBackend;
  let instance: WebhookInstance;
  let receiver: ChildProcess | undefined;

  beforeAll(async () => {
    backend = await createTestBackend();
    instance = await startWebhookInstance(backend);
  });
  afterAll(async () => {
    receiver?.kill();
    await instance?.close();
    await backend?.cleanup();
  });

  it('shows the example receiver as it is in examples/', async () => {
    const guide = await fs.readFile(path.join(ROOT, 'docs/guides/webhooks.md'), 'utf8');
    const block = /```js\n([\s\S]*?)```/.exec(guide)?.[1];
    expect(block).toBe(await fs.readFile(EXAMPLE, 'utf8'));
    // Text a user reads needs no knowledge of the design record's numbering.
    expect(guide).not.toMatch(/\bD\d{1,2}\b/);
  });

  it('the example verifies and prints deliveries, once each, and refuses a forged one', async () => {
    const ada = await userHeaders(instance, ['acme']);
    const port = await freePort();
    const created = await instance.app.inject({
      method: 'POST',
      url: '/v3/identity/webhook-endpoints',
      headers: ada,
      payload: { accountId: 'acme', url: `http://127.0.0.1:${port}/`, events: ['webhook_endpoint.updated'] },
    });
    expect(created.statusCode).toBe(201);
    const endpoint = created.json();
    let stdout = '';
    let stderr = '';
    receiver = spawn(process.execPath, [EXAMPLE], {
      env: { ...process.env, PLAYBOOK_WEBHOOK_SECRET: endpoint.secret, PORT: String(port) },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    receiver.stdout!.on('data', (chunk: Buffer) => {
      stdout += chunk.toString();
    });
    receiver.stderr!.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    await waitFor('the receiver listening', () => stderr.includes('listening on'));

    await instance.app.inject({
      method: 'POST',
      url: `/v3/identity/webhook-endpoints/${endpoint.id}/test`,
      headers: ada,
    });
    await waitFor('the test event printed', () => stdout.includes('webhook.test'));
    const patched = await instance.app.inject({
      method: 'PATCH',
      url: `/v3/identity/webhook-endpoints/${endpoint.id}`,
      headers: ada,
      payload: { description: 'seen by the example' },
    });
    expect(patched.statusCode).toBe(200);
    await waitFor('the change printed', () => stdout.includes('webhook_endpoint.updated'));
    const lines = stdout
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line));
    expect(lines).toContainEqual({
      type: 'webhook_endpoint.updated',
      target: { kind: 'webhook_endpoint', id: endpoint.id },
    });

    // Sent again: answered, not printed twice.
    const attempts = (
      await instance.app.inject({
        url: `/v3/identity/webhook-endpoints/${endpoint.id}/deliveries`,
        headers: ada,
      })
    ).json().data as { deliveryId: string; type: string; statusCode: number }[];
    expect(attempts.every((a) => a.statusCode === 204)).toBe(true);
    const update = attempts.find((a) => a.type === 'webhook_endpoint.updated')!;
    await instance.app.inject({
      method: 'POST',
      url: `/v3/identity/webhook-endpoints/${endpoint.id}/deliveries/${update.deliveryId}/retry`,
      headers: ada,
    });
    await waitFor('the repeat answered', async () => {
      const list = (
        await instance.app.inject({
          url: `/v3/identity/webhook-endpoints/${endpoint.id}/deliveries`,
          headers: ada,
        })
      ).json().data as unknown[];
      return list.length === 3;
    });
    expect(
      stdout
        .trim()
        .split('\n')
        .filter((line) => line.includes('webhook_endpoint.updated')),
    ).toHaveLength(1);

    const forged = await fetch(`http://127.0.0.1:${port}/`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'webhook-id': 'forged',
        'webhook-timestamp': String(Math.floor(Date.now() / 1000)),
        'webhook-signature': `v1,${Buffer.alloc(32).toString('base64')}`,
      },
      body: JSON.stringify({
        type: 'catalog.archived',
        timestamp: new Date().toISOString(),
        data: { id: 'forged' },
      }),
    });
    expect(forged.status).toBe(400);
    expect(stdout).not.toContain('catalog.archived');
    await waitFor('the refusal said', () => stderr.includes('refused a delivery'));
  });
});
