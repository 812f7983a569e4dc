import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { UnitOfWork } from '../../src/changes/unit-of-work.js';
import { deliveryOutbox, takeDispatchTurn } from '../../src/webhooks/outbox.js';
import { PendingBound } from '../../src/webhooks/pending-bound.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';

/**
 * D28 on PostgreSQL, where writes and the dispatcher's turns run at once: a write counts what it makes
 * due on its endpoints' rows only just before it commits, so that a turn, which updates the same rows
 * (what finished, runs of failures and timeouts), never waits out a long write.
 */
describe("the outbox holds its endpoints' rows for the commit only (D28)", () => {
  let backend: TestBackend;
  const at = '2026-01-01T00:00:00.000Z';

  beforeAll(async () => {
    backend = await createTestBackend();
    const db = backend.databases.primary;
    await sql`insert into accounts (id, name, plan, created_at, updated_at) values ('acme', null, 'free', ${at}, ${at})`.execute(
      db,
    );
    await sql`insert into webhook_endpoints
        (id, account_id, url, events, description, status, secret_sealed, secret_key_id, created_at, updated_at, failing_since, pending_deliveries)
      values ('e', 'acme', 'https://hooks.example.com/', '["*"]', null, 'enabled', 'sealed', 'key', ${at}, ${at}, null, 1)`.execute(
      db,
    );
    await sql`insert into webhook_subscriptions (endpoint_id, account_id, event_type) values ('e', 'acme', '*')`.execute(
      db,
    );
    await sql`insert into webhook_deliveries
        (id, endpoint_id, change_seq, event_id, event_type, payload, status, attempts, next_attempt_at, leased_until, lease_token, created_at, updated_at)
      values ('in-flight', 'e', null, 'event', 'webhook.test', '{}', 'pending', 0, ${at}, '2100-01-01T00:00:00.000Z', 'lease', ${at}, ${at})`.execute(
      db,
    );
  });
  afterAll(async () => {
    await backend?.cleanup();
  });

  it('a turn keeps an attempt of an endpoint while a write that made deliveries due to it is still open', async () => {
    const outbox = deliveryOutbox(new PendingBound({ max: 10_000 }));
    const writes = new UnitOfWork(backend.databases.writer, {
      afterAppend: [outbox.afterAppend],
      beforeCommitting: [outbox.beforeCommitting],
    });
    let appended!: () => void;
    const deliveriesMade = new Promise<void>((resolve) => {
      appended = resolve;
    });
    let finish!: () => void;
    const finished = new Promise<void>((resolve) => {
      finish = resolve;
    });
    const write = writes.run('account-set', { actor: { type: 'operator' } }, async (scope) => {
      await scope.append([
        {
          namespace: 'acme',
          type: 'account.plan_changed',
          target: { kind: 'account', id: 'acme' },
          summary: 'plan',
        },
      ]);
      appended();
      // A long write: more of its work comes after what it made due.
      await finished;
    });
    await deliveriesMade;
    const turn = takeDispatchTurn(backend.databases.primary, {
      attempts: [
        {
          id: 'attempt',
          deliveryId: 'in-flight',
          endpointId: 'e',
          token: 'lease',
          attempt: 1,
          at,
          ok: true,
          statusCode: 204,
          durationMs: 3,
        },
      ],
      drops: [],
    });
    const outcome = await Promise.race([
      turn.then(() => 'kept' as const),
      new Promise<'waiting'>((resolve) => setTimeout(() => resolve('waiting'), 3000)),
    ]);
    finish();
    await write;
    await turn;
    expect(outcome).toBe('kept');
    const row = await backend.databases.primary
      .selectFrom('webhook_endpoints')
      .select('pending_deliveries')
      .where('id', '=', 'e')
      .executeTakeFirstOrThrow();
    // One finished by the turn, one made due by the write.
    expect(row.pending_deliveries).toBe(1);
  });
});
