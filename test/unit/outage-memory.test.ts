import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { AccountPlans } from '../../src/accounts/account-plans.js';
import { AnswerCache } from '../../src/answers/answer-cache.js';
import { answerKey } from '../../src/answers/answer-keys.js';
import type { ApiKeyWithPlan } from '../../src/auth/api-key-repository.js';
import { ApiKeyVerifier } from '../../src/auth/api-key-verifier.js';
import { sha256Hasher } from '../../src/auth/secret-digest.js';
import { UsageRecorder } from '../../src/auth/usage-recorder.js';
import type { Change } from '../../src/changes/change-log.js';
import { MemoryTrust } from '../../src/changes/memory-trust.js';
import type { Db } from '../../src/db/tables.js';
import { InProcessBroadcast } from '../../src/foundation/broadcast.js';
import { AuthenticationError, UnavailableError } from '../../src/foundation/errors.js';
import { Answer } from '../../src/http/answer.js';
import { DependencyHealth } from '../../src/observability/dependency-health.js';
import { Metrics } from '../../src/observability/metrics.js';
import { generateApiKey } from '../../src/schemas/api-key-format.js';

/**
 * D31 in memory: what an instance holds is served while the change log is followed and through a
 * database outage, not once the database answers again before the log has been read; keys and plans
 * verified before an outage are served through it, expiry and revocations still applying.
 */

interface LogLine {
  level: number;
  msg: string;
  [field: string]: unknown;
}

function capturing() {
  const lines: LogLine[] = [];
  const logger = pino(
    { level: 'info' },
    { write: (line: string) => void lines.push(JSON.parse(line) as LogLine) },
  );
  return { logger, lines };
}

const outage = () =>
  new UnavailableError('the database did not answer', { cause: new Error('ECONNREFUSED') });

describe('dependency health (D31)', () => {
  it('says each change once, with the reason and no stack, and the gauge follows', async () => {
    const { logger, lines } = capturing();
    const metrics = new Metrics();
    let now = 1_000;
    const health = new DependencyHealth('database', logger, metrics, 'memory is served', () => now);
    const gauge = async () =>
      (await metrics.registry.getSingleMetricAsString('playbook_dependency_up')).split('\n').at(-1);
    expect(await gauge()).toBe('playbook_dependency_up{dependency="database"} 1');
    const changes: boolean[] = [];
    health.onChange((up) => changes.push(up));
    for (let i = 0; i < 50; i++) health.failed(outage());
    expect(health.isUp).toBe(false);
    expect(await gauge()).toBe('playbook_dependency_up{dependency="database"} 0');
    now += 2_500;
    for (let i = 0; i < 50; i++) health.succeeded();
    expect(health.isUp).toBe(true);
    expect(changes).toEqual([false, true]);
    expect(lines.map((line) => [line.level, line.msg])).toEqual([
      [40, 'database is unreachable: memory is served'],
      [30, 'database is reachable again'],
    ]);
    expect(lines[0]).toMatchObject({ dependency: 'database', reason: 'ECONNREFUSED' });
    expect(lines[1]).toMatchObject({ dependency: 'database', downSeconds: 2.5 });
    expect(JSON.stringify(lines)).not.toContain('stack');
  });

  it('a dependency of several parts is back only when every part is', () => {
    const { logger, lines } = capturing();
    const health = new DependencyHealth('redis', logger, new Metrics(), 'counted locally');
    health.failed(new Error('connection closed'), 'rate-limits');
    health.failed(new Error('connection closed'), 'revocations');
    health.succeeded('rate-limits');
    expect(health.isUp).toBe(false);
    health.succeeded('revocations');
    expect(health.isUp).toBe(true);
    expect(lines.map((line) => line.msg)).toEqual([
      'redis is unreachable: counted locally',
      'redis is reachable again',
    ]);
    expect(lines[0]).toMatchObject({ part: 'rate-limits' });
  });
});

describe('trust in memory (D31)', () => {
  /** A database health whose state the test sets, telling its listener as the real one does. */
  function databaseHealth() {
    let listener: ((up: boolean) => void) | undefined;
    const state = {
      isUp: true,
      onChange: (next: (up: boolean) => void) => {
        listener = next;
        return () => {
          listener = undefined;
        };
      },
      set(up: boolean) {
        state.isUp = up;
        listener?.(up);
      },
    };
    return state;
  }

  it('trusts memory while the log is followed and while the database is out, not in between', () => {
    const follower = { current: true };
    const database = databaseHealth();
    const trust = new MemoryTrust({ follower, database });
    expect([trust.trusted, trust.outage]).toEqual([true, false]);
    // The database goes: the follower's read fails with it.
    follower.current = false;
    database.set(false);
    expect([trust.trusted, trust.outage]).toEqual([true, true]);
    // The database answers again, the log not yet read: memory may miss what changed meanwhile.
    database.set(true);
    expect([trust.trusted, trust.outage]).toEqual([false, false]);
    follower.current = true;
    expect(trust.trusted).toBe(true);
  });

  it('a failure after the database came back, before the log was read, is no outage to serve memory through', () => {
    const follower = { current: true };
    const database = databaseHealth();
    const trust = new MemoryTrust({ follower, database });
    follower.current = false;
    database.set(false);
    database.set(true);
    // A busy pool times out: the database looks down again, but memory may already be stale.
    database.set(false);
    expect([trust.trusted, trust.outage]).toEqual([false, false]);
    // Once the follower has read the log, an outage is served through again.
    follower.current = true;
    expect(trust.trusted).toBe(true);
    follower.current = false;
    expect([trust.trusted, trust.outage]).toEqual([true, true]);
    trust.close();
  });
});

describe('answers held while memory is not trusted (D31)', () => {
  it('are neither served nor kept, and are served again once it is', () => {
    const trust = { trusted: true, outage: false };
    const cache = new AnswerCache(1024 * 1024, new Metrics(), trust);
    const held = answerKey('resource', null, 'held');
    cache.set(held, Answer.json('{"held":true}'), cache.ticket(), ['svc']);
    expect(cache.get(held)).toBeDefined();
    trust.trusted = false;
    expect(cache.get(held)).toBeUndefined();
    const made = answerKey('resource', null, 'made');
    cache.set(made, Answer.json('{"made":true}'), cache.ticket(), ['svc']);
    trust.trusted = true;
    expect(cache.get(made)).toBeUndefined();
    expect(cache.get(held)).toBeDefined();
  });
});

describe('keys and plans through an outage (D31)', () => {
  const account = 'acme';

  function setup(options: { expiresAt?: string } = {}) {
    const minted = generateApiKey('test');
    const row: ApiKeyWithPlan = {
      id: minted.keyId,
      account_id: account,
      name: 'k',
      scopes: JSON.stringify(['playbook:read']),
      environment: 'test',
      secret_hash: sha256Hasher.digest(minted.secret).toString('hex'),
      created_at: '2031-01-01T00:00:00.000Z',
      expires_at: options.expiresAt ?? null,
      revoked_at: null,
      last_used_at: null,
      replaced_by: null,
      restrictions: null,
      plan: 'pro',
    } as unknown as ApiKeyWithPlan;
    const storage = {
      down: false,
      reads: 0,
      row: row as ApiKeyWithPlan | undefined,
      /** While set, reads wait for it: a read under way when something else happens. */
      gate: undefined as Promise<void> | undefined,
    };
    const trust = { trusted: true, outage: false };
    let now = Date.parse('2031-05-01T12:00:00.000Z');
    const revocations = new InProcessBroadcast();
    const verifier = new ApiKeyVerifier({
      lookup: {
        find: async () => {
          storage.reads++;
          const row = storage.row;
          await storage.gate;
          if (storage.down) throw outage();
          return row;
        },
      },
      hasher: sha256Hasher,
      revocations,
      usage: new UsageRecorder({} as Db, pino({ level: 'silent' }), { intervalMs: 3_600_000 }),
      environment: 'test',
      now: () => now,
      trust,
    });
    return {
      key: minted.key,
      keyId: minted.keyId,
      verifier,
      storage,
      trust,
      revocations,
      advance: (ms: number) => {
        now += ms;
      },
    };
  }

  it('a key verified before is served from memory through the outage, without reading storage', async () => {
    const { key, verifier, storage, trust, advance } = setup();
    expect((await verifier.verify(key)).plan).toBe('pro');
    storage.down = true;
    trust.outage = true;
    advance(5_000);
    const reads = storage.reads;
    expect(verifier.verifyFromMemory(key)?.accountId).toBe(account);
    expect((await verifier.verify(key)).accountId).toBe(account);
    expect(storage.reads).toBe(reads);
  });

  it('the read that finds the database out serves the key held, before its health has said so', async () => {
    const { key, verifier, storage, advance } = setup();
    await verifier.verify(key);
    storage.down = true;
    advance(5_000);
    expect(verifier.verifyFromMemory(key)).toBeUndefined();
    expect((await verifier.verify(key)).accountId).toBe(account);
  });

  it('expiry still applies, and a revocation announced meanwhile is refused from memory', async () => {
    const expiring = setup({ expiresAt: '2031-05-01T12:00:03.000Z' });
    await expiring.verifier.verify(expiring.key);
    expiring.storage.down = true;
    expiring.trust.outage = true;
    expiring.advance(5_000);
    await expect(expiring.verifier.verify(expiring.key)).rejects.toMatchObject({ reason: 'expired' });

    const revoked = setup();
    await revoked.verifier.verify(revoked.key);
    revoked.storage.down = true;
    revoked.trust.outage = true;
    await revoked.revocations.publish(revoked.keyId);
    const refusal = revoked.verifier.verify(revoked.key);
    await expect(refusal).rejects.toBeInstanceOf(AuthenticationError);
    await expect(refusal).rejects.toMatchObject({ reason: 'revoked' });
  });

  it('a read begun before a revocation was announced cannot undo it, for those that joined it too', async () => {
    const { key, keyId, verifier, storage, revocations, advance } = setup();
    await verifier.verify(key);
    advance(5_000);
    let open: () => void = () => {};
    storage.gate = new Promise((resolve) => {
      open = resolve;
    });
    // A read of the key begins; it will say what storage held before the revocation.
    const first = verifier.verify(key);
    await revocations.publish(keyId);
    const second = verifier.verify(key);
    open();
    await expect(first).rejects.toMatchObject({ reason: 'revoked' });
    await expect(second).rejects.toMatchObject({ reason: 'revoked' });
    storage.gate = undefined;
    storage.down = true;
    await expect(verifier.verify(key)).rejects.toMatchObject({ reason: 'revoked' });
  });

  it('while the database is back but the log not yet read, even a fresh key is read from storage', async () => {
    const { key, verifier, storage, trust } = setup();
    await verifier.verify(key);
    trust.trusted = false;
    const reads = storage.reads;
    expect(verifier.verifyFromMemory(key)).toBeUndefined();
    storage.row = { ...storage.row!, revoked_at: '2031-05-01T12:00:00.500Z' };
    await expect(verifier.verify(key)).rejects.toMatchObject({ reason: 'revoked' });
    expect(storage.reads).toBe(reads + 1);
  });

  it('a key never verified here answers 503 while the database is out, not 401', async () => {
    const { key, verifier, storage, trust } = setup();
    storage.down = true;
    trust.outage = true;
    await expect(verifier.verify(key)).rejects.toBeInstanceOf(UnavailableError);
  });

  it('a revocation read in the change log is refused from memory, whatever Redis carried', async () => {
    const { key, keyId, verifier, storage, trust } = setup();
    await verifier.verify(key);
    const change = { type: 'api_key.revoked', namespace: account, target: { kind: 'api_key', id: keyId } };
    verifier.follow({ changes: [change as unknown as Change], startAfresh: false, seq: 2 });
    storage.down = true;
    trust.outage = true;
    await expect(verifier.verify(key)).rejects.toMatchObject({ reason: 'revoked' });
  });

  it("a plan change read in the log makes the account's keys read storage again", async () => {
    const { key, verifier, storage } = setup();
    await verifier.verify(key);
    const reads = storage.reads;
    const change = {
      type: 'account.plan_changed',
      namespace: account,
      target: { kind: 'account', id: account },
    };
    verifier.follow({ changes: [change as unknown as Change], startAfresh: false, seq: 3 });
    storage.row = { ...storage.row!, plan: 'enterprise' };
    expect((await verifier.verify(key)).plan).toBe('enterprise');
    expect(storage.reads).toBe(reads + 1);
  });

  it("an account's plan read before the outage is served through it", async () => {
    let down = false;
    let reads = 0;
    const chain = {
      selectFrom: () => chain,
      select: () => chain,
      where: () => chain,
      executeTakeFirst: async () => {
        reads++;
        if (down) throw outage();
        return { plan: 'pro' };
      },
    };
    let now = 0;
    const trust = { trusted: true, outage: false };
    const plans = new AccountPlans(chain as unknown as Db, () => now, 1000, trust);
    expect(await plans.planOf(account)).toBe('pro');
    down = true;
    now += 5_000;
    // The first read finds the database out; the plan held is served.
    expect(await plans.planOf(account)).toBe('pro');
    trust.outage = true;
    const before = reads;
    expect(await plans.planOf(account)).toBe('pro');
    expect(reads).toBe(before);
    await expect(plans.planOf('another')).rejects.toBeInstanceOf(UnavailableError);
  });
});
