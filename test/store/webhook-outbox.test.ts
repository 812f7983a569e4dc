import { sql } from 'kysely';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { Db } from '../../src/db/tables.js';
import type { ClaimRequest } from '../../src/webhooks/claim.js';
import { type AttemptRecord, takeDispatchTurn } from '../../src/webhooks/outbox.js';
import { PendingBound } from '../../src/webhooks/pending-bound.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';

/**
 * D28 on both stacks, in the outbox itself: which due deliveries a claim leases (accounts in turns,
 * half the slots at most for one while another waits, one attempt at a time for an endpoint that keeps
 * timing out), how a turn follows each endpoint (its runs of failures and of timeouts, what is
 * pending), and the bound on what is pending to one endpoint.
 */

const START = Date.parse('2026-01-01T00:00:00.000Z');
const at = (ms: number) => new Date(START + ms).toISOString();
const NOW = at(86_400_000);
const LATER = at(86_400_000 + 60_000);

let backend: TestBackend;
let db: Db;

beforeAll(async () => {
  backend = await createTestBackend();
  db = backend.databases.primary;
});
afterAll(async () => {
  await backend?.cleanup();
});

beforeEach(async () => {
  for (const table of ['webhook_attempts', 'webhook_deliveries', 'webhook_endpoints', 'accounts'] as const) {
    await db.deleteFrom(table).execute();
  }
});

async function endpoint(id: string, accountId: string, timeoutsInARow = 0): Promise<void> {
  await sql`insert into accounts (id, plan, created_at, updated_at)
    select ${accountId}, 'free', ${at(0)}, ${at(0)}
    where not exists (select 1 from accounts where id = ${accountId})`.execute(db);
  await db
    .insertInto('webhook_endpoints')
    .values({
      id,
      account_id: accountId,
      url: 'https://hooks.example.com/',
      events: '["*"]',
      description: null,
      status: 'enabled',
      secret_sealed: 'sealed',
      secret_key_id: 'key',
      created_at: at(0),
      updated_at: at(0),
      failing_since: null,
      timeouts_in_a_row: timeoutsInARow,
    })
    .execute();
}

/**
 * `count` deliveries pending to an endpoint, due (and made) one ms apart from `fromMs`, named by it;
 * counted unless the test counts them itself.
 */
async function due(endpointId: string, count: number, fromMs = 0, counted = true): Promise<string[]> {
  const rows = Array.from({ length: count }, (_, i) => ({
    id: `${endpointId}-${String(fromMs + i).padStart(8, '0')}`,
    endpoint_id: endpointId,
    event_id: `${endpointId}-event-${i}`,
    event_type: 'webhook.test',
    payload: '{}',
    status: 'pending' as const,
    attempts: 0,
    next_attempt_at: at(fromMs + i),
    created_at: at(fromMs + i),
    updated_at: at(fromMs + i),
  }));
  for (let i = 0; i < rows.length; i += 500) {
    await db
      .insertInto('webhook_deliveries')
      .values(rows.slice(i, i + 500))
      .execute();
  }
  if (counted) {
    await db
      .updateTable('webhook_endpoints')
      .set((eb) => ({ pending_deliveries: eb('pending_deliveries', '+', count) }))
      .where('id', '=', endpointId)
      .execute();
  }
  return rows.map((row) => row.id);
}

function claim(request: Partial<ClaimRequest> = {}) {
  return takeDispatchTurn(db, {
    attempts: [],
    drops: [],
    claim: {
      now: NOW,
      leasedUntil: LATER,
      token: 'lease',
      limit: 10,
      perEndpoint: 2,
      perAccount: 5,
      unbounded: new Set(),
      inFlight: new Map(),
      inFlightByAccount: new Map(),
      lastServed: () => 0,
      ...request,
    },
  });
}

const endpointsOf = (claimed: readonly { endpoint_id: string }[]) => claimed.map((d) => d.endpoint_id);
const accountsOf = (claimed: readonly { endpoint: { account_id: string } }[]) =>
  claimed.map((d) => d.endpoint.account_id);

describe('a claim shares the free slots between accounts and endpoints (D28)', () => {
  it('accounts take turns, one delivery each, and one holds at most half the slots while the other waits', async () => {
    for (let i = 0; i < 6; i++) {
      await endpoint(`a${i}`, 'acme');
      await due(`a${i}`, 3, i);
    }
    for (let i = 0; i < 3; i++) {
      await endpoint(`b${i}`, 'globex');
      await due(`b${i}`, 3, 1000 + i);
    }
    const { claimed, left } = await claim();
    // The account whose delivery is the oldest first, then in turns; each endpoint takes its turn.
    expect(accountsOf(claimed)).toEqual(Array(5).fill(['acme', 'globex']).flat());
    expect(endpointsOf(claimed)).toEqual(['a0', 'b0', 'a1', 'b1', 'a2', 'b2', 'a3', 'b0', 'a4', 'b1']);
    expect(left).toBe(true);
  });

  it('the account served longest ago goes first', async () => {
    await endpoint('a0', 'acme');
    await due('a0', 3);
    await endpoint('b0', 'globex');
    await due('b0', 3, 1000);
    const served = new Map([
      ['acme', 7],
      ['globex', 3],
    ]);
    const { claimed } = await claim({ limit: 3, lastServed: (id) => served.get(id) ?? 0 });
    expect(accountsOf(claimed)).toEqual(['globex', 'acme', 'globex']);
  });

  it('an account alone with deliveries due takes every slot', async () => {
    for (let i = 0; i < 6; i++) {
      await endpoint(`a${i}`, 'acme');
      await due(`a${i}`, 3, i);
    }
    const { claimed } = await claim();
    expect(claimed).toHaveLength(10);
    for (const id of new Set(endpointsOf(claimed))) {
      expect(endpointsOf(claimed).filter((taken) => taken === id).length).toBeLessThanOrEqual(2);
    }
  });

  it("another account's delivery is found behind ten thousand of one account's, and takes the slot its half leaves", async () => {
    for (let i = 0; i < 5; i++) {
      await endpoint(`a${i}`, 'acme');
      await due(`a${i}`, 2000, i * 2000);
    }
    await endpoint('b0', 'globex');
    const [test] = await due('b0', 1, 3_600_000);
    const busy = {
      limit: 1,
      inFlight: new Map([
        ['a0', 2],
        ['a1', 2],
        ['a2', 2],
        ['a3', 2],
        ['a4', 1],
      ]),
      inFlightByAccount: new Map([['acme', 9]]),
    };
    const first = await claim(busy);
    expect(first.claimed.map((d) => d.id)).toEqual([test]);
    // With nothing else waiting, the account may take the last slot again.
    const second = await claim({ ...busy, token: 'next' });
    expect(endpointsOf(second.claimed)).toEqual(['a4']);
    expect(second.claimed[0]!.id).toBe('a4-00008000');
  });

  it('while another account waits, an account at its half takes nothing more; once none waits, it may', async () => {
    await endpoint('a0', 'acme');
    await due('a0', 5);
    await endpoint('b0', 'globex');
    await due('b0', 5, 1000);
    const { claimed } = await claim({
      perEndpoint: 10,
      inFlight: new Map([['a0', 5]]),
      inFlightByAccount: new Map([['acme', 5]]),
    });
    expect(accountsOf(claimed)).toEqual([...Array(5).fill('globex'), ...Array(5).fill('acme')]);
  });

  it('an endpoint with three timeouts in a row takes one attempt at a time; with two, its share', async () => {
    await endpoint('slow', 'acme', 3);
    await due('slow', 5);
    await endpoint('late', 'globex', 2);
    await due('late', 5, 1000);
    const first = await claim();
    expect(endpointsOf(first.claimed).sort()).toEqual(['late', 'late', 'slow']);
    const held = await claim({
      token: 'next',
      inFlight: new Map([
        ['slow', 1],
        ['late', 2],
      ]),
    });
    expect(held).toMatchObject({ claimed: [], left: true });
  });

  it('an endpoint that answers quickly takes any free slot', async () => {
    await endpoint('quick', 'acme');
    await due('quick', 12);
    const { claimed } = await claim({ unbounded: new Set(['quick']) });
    expect(claimed).toHaveLength(10);
  });

  it('leases nothing of a disabled endpoint, and nothing not yet due', async () => {
    await endpoint('off', 'acme');
    await due('off', 2);
    await db.updateTable('webhook_endpoints').set({ status: 'disabled' }).execute();
    await endpoint('later', 'globex');
    await due('later', 2, 2 * 86_400_000);
    expect(await claim()).toMatchObject({ claimed: [], left: false });
  });
});

describe('a turn follows each endpoint it kept attempts of (D28)', () => {
  const row = () =>
    db
      .selectFrom('webhook_endpoints')
      .select(['timeouts_in_a_row', 'failing_since', 'pending_deliveries'])
      .where('id', '=', 'e')
      .executeTakeFirstOrThrow();
  let ids: string[] = [];
  let next = 0;

  beforeEach(async () => {
    await endpoint('e', 'acme');
    ids = await due('e', 30);
    next = 0;
    await db.updateTable('webhook_deliveries').set({ leased_until: LATER, lease_token: 'lease' }).execute();
  });

  /** An attempt of the next delivery: retried (still pending) unless `final`. */
  function attempt(outcome: 'ok' | 'timeout' | 'status' | 'network', final = false): AttemptRecord {
    const n = next++;
    const ok = outcome === 'ok';
    return {
      id: `attempt-${n}`,
      deliveryId: ids[n]!,
      endpointId: 'e',
      token: 'lease',
      attempt: 1,
      at: at(1000 + n),
      ok,
      durationMs: 5,
      ...(ok ? {} : { reason: outcome, error: outcome }),
      ...(ok || final ? {} : { nextAttemptAt: at(90_000_000) }),
    };
  }
  const turn = (...attempts: AttemptRecord[]) => takeDispatchTurn(db, { attempts, drops: [] });

  it('three timeouts in a row, in one turn or several; another failure ends a shorter run only; a 2xx ends any', async () => {
    await turn(attempt('timeout'), attempt('timeout'));
    expect(await row()).toMatchObject({ timeouts_in_a_row: 2, failing_since: at(1000) });
    await turn(attempt('status'));
    expect(await row()).toMatchObject({ timeouts_in_a_row: 0, failing_since: at(1000) });
    await turn(attempt('timeout'), attempt('timeout'), attempt('timeout'));
    expect((await row()).timeouts_in_a_row).toBe(3);
    await turn(attempt('network'));
    expect((await row()).timeouts_in_a_row).toBe(3);
    await turn(attempt('timeout'));
    expect((await row()).timeouts_in_a_row).toBe(4);
    await turn(attempt('ok'), attempt('timeout'));
    expect(await row()).toMatchObject({ timeouts_in_a_row: 1, failing_since: at(1000 + 9) });
    await turn(attempt('timeout'), attempt('network'), attempt('timeout'));
    expect((await row()).timeouts_in_a_row).toBe(1);
    await turn(attempt('timeout'), attempt('timeout'), attempt('network'), attempt('timeout'));
    expect((await row()).timeouts_in_a_row).toBe(4);
    await turn(attempt('ok'));
    expect(await row()).toMatchObject({ timeouts_in_a_row: 0, failing_since: null });
    const listed = await db.selectFrom('webhook_attempts').select(['id', 'reason']).orderBy('at').execute();
    expect(listed.slice(0, 3).map((a) => a.reason)).toEqual(['timeout', 'timeout', 'status']);
    expect(listed.at(-1)?.reason).toBeNull();
  });

  it('what finished, or was dropped, is no longer pending; what is due again still is', async () => {
    expect((await row()).pending_deliveries).toBe(30);
    await turn(attempt('ok'), attempt('timeout'), attempt('status', true));
    expect((await row()).pending_deliveries).toBe(28);
    // An attempt under a lease that lapsed and was taken over moves nothing.
    await turn({ ...attempt('ok'), token: 'lapsed' });
    expect((await row()).pending_deliveries).toBe(28);
    await takeDispatchTurn(db, {
      attempts: [],
      drops: [
        { deliveryId: ids[10]!, token: 'lease' },
        { deliveryId: ids[11]!, token: 'lapsed' },
      ],
    });
    expect((await row()).pending_deliveries).toBe(27);
    const pending = await db
      .selectFrom('webhook_deliveries')
      .select((eb) => eb.fn.countAll<number | string>().as('n'))
      .where('status', '=', 'pending')
      .executeTakeFirstOrThrow();
    expect(Number(pending.n)).toBe(27);
  });
});

describe('the bound on what is pending to one endpoint (D28)', () => {
  const bound = new PendingBound({ max: 3, now: () => Date.parse(NOW) });
  const statuses = async () =>
    Object.fromEntries(
      (await db.selectFrom('webhook_deliveries').select(['id', 'status']).orderBy('id').execute()).map(
        (d) => [d.id, d.status],
      ),
    );
  const pending = async () =>
    (
      await db
        .selectFrom('webhook_endpoints')
        .select('pending_deliveries')
        .where('id', '=', 'e')
        .executeTakeFirstOrThrow()
    ).pending_deliveries;
  /** Deliveries as the outbox adds them: inserted, then counted and bounded. */
  async function added(count: number, fromMs: number): Promise<string[]> {
    const made = await due('e', count, fromMs, false);
    await db.transaction().execute((trx) => bound.add(trx, new Map([['e', count]])));
    return made;
  }

  it('fails the oldest not in flight past the bound, each listed as backlog_exceeded, never one asked for again', async () => {
    await endpoint('e', 'acme');
    const [d0, d1, d2] = await added(3, 0);
    expect(await pending()).toBe(3);
    expect(await db.selectFrom('webhook_attempts').selectAll().execute()).toEqual([]);

    // d0 is in flight: the next oldest fail in its place.
    await db
      .updateTable('webhook_deliveries')
      .set({ leased_until: LATER, lease_token: 'lease' })
      .where('id', '=', d0!)
      .execute();
    const [d3, d4] = await added(2, 100);
    expect(await statuses()).toMatchObject({
      [d0!]: 'pending',
      [d1!]: 'failed',
      [d2!]: 'failed',
      [d3!]: 'pending',
      [d4!]: 'pending',
    });
    expect(await pending()).toBe(3);
    const listed = await db.selectFrom('webhook_attempts').selectAll().orderBy('delivery_id').execute();
    expect(listed.map((a) => a.delivery_id)).toEqual([d1, d2]);
    for (const attempt of listed) {
      expect(attempt).toMatchObject({
        endpoint_id: 'e',
        attempt: 1,
        at: NOW,
        outcome: 'failed',
        status_code: null,
        duration_ms: 0,
        reason: 'backlog_exceeded',
        next_attempt_at: null,
      });
      expect(attempt.error).toMatch(/^not sent: more than 3 deliveries were pending/);
    }
    const failed = await db
      .selectFrom('webhook_deliveries')
      .selectAll()
      .where('id', '=', d1!)
      .executeTakeFirstOrThrow();
    expect(failed).toMatchObject({ attempts: 1, leased_until: null, lease_token: null });

    // Asked for again: pending once more, and the oldest other not in flight fails instead.
    const retried = await bound.makeDue(db, 'e', d1!, NOW);
    expect(retried).toMatchObject({ id: d1, status: 'pending', next_attempt_at: NOW, attempts: 1 });
    expect(await statuses()).toMatchObject({
      [d0!]: 'pending',
      [d1!]: 'pending',
      [d3!]: 'failed',
      [d4!]: 'pending',
    });
    expect(await pending()).toBe(3);
    // One pending already is only made due now.
    expect(await bound.makeDue(db, 'e', d4!, LATER)).toMatchObject({
      status: 'pending',
      next_attempt_at: LATER,
    });
    expect(await pending()).toBe(3);
    expect(await bound.makeDue(db, 'e', 'no-such-delivery', NOW)).toBeUndefined();

    // A test event counts too.
    await bound.insert(db, {
      id: 'test',
      endpoint_id: 'e',
      event_id: 'test-event',
      event_type: 'webhook.test',
      payload: '{}',
      status: 'pending',
      attempts: 0,
      next_attempt_at: LATER,
      created_at: LATER,
      updated_at: LATER,
    });
    expect(await statuses()).toMatchObject({ [d1!]: 'failed', test: 'pending' });
    expect(await pending()).toBe(3);
  });
});
