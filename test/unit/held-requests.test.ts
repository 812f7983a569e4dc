import { afterEach, describe, expect, it, vi } from 'vitest';
import type { Principal } from '../../src/auth/principal.js';
import type { FollowedChanges } from '../../src/changes/change-follower.js';
import type { Change } from '../../src/changes/change-log.js';
import { CapacityError, RateLimitError } from '../../src/foundation/errors.js';
import { Metrics } from '../../src/observability/metrics.js';
import { type Holder, holderOf, type WaitOutcome } from '../../src/sync/change-waits.js';
import { accountShare, type FollowedLog, HeldRequests } from '../../src/sync/held-requests.js';
import { heldRefusals } from '../helpers/sync.js';

/**
 * D27's shares of the held requests: one credential, one account and the instance each hold at most
 * their share, a request past one is refused at once and takes nothing, and a held request gives its
 * place back with whatever outcome it has, so that none leaks.
 */

/** A follower of the change log that tells what a test says, when it says it. */
class ToldLog implements FollowedLog {
  toldUpTo: number | undefined = 10;
  private readonly listeners = new Set<(followed: FollowedChanges) => void>();

  onChange(listener: (followed: FollowedChanges) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  tell(followed: FollowedChanges): void {
    this.toldUpTo = followed.seq;
    for (const listener of this.listeners) listener(followed);
  }

  /** A Catalog change of `namespace` at `seq`. */
  changed(namespace: string, seq: number): void {
    const change: Change = {
      seq,
      id: `change-${seq}`,
      at: new Date().toISOString(),
      actor: { type: 'operator' },
      namespace,
      type: 'catalog.version_published',
      target: { kind: 'catalog', id: `catalog-${seq}` },
      summary: 'published',
    };
    this.tell({ changes: [change], startAfresh: false, seq });
  }
}

const key = (keyId: string, accountId: string): Holder => ({
  credential: `key:${keyId}`,
  account: `account:${accountId}`,
});
const ACME_1 = key('acme1', 'acme');
const ACME_2 = key('acme2', 'acme');
const ACME_3 = key('acme3', 'acme');
const GLOBEX = key('globex1', 'globex');

function heldRequests(options: { maxHeld?: number; maxPerCredential?: number; maxPerAccount?: number } = {}) {
  const log = new ToldLog();
  const metrics = new Metrics();
  const held = new HeldRequests(log, {
    maxHeld: options.maxHeld ?? 100,
    maxPerCredential: options.maxPerCredential ?? 3,
    maxPerAccount: options.maxPerAccount ?? 5,
    metrics,
  });
  /** A request of `holder` held at the log's position, on its account's namespace and the service's. */
  const hold = (holder: Holder, signal?: AbortSignal, ms = 60_000): Promise<WaitOutcome> =>
    held.wait([holder.account.replace('account:', ''), 'svc'], log.toldUpTo ?? 10, ms, holder, signal);
  const refusals = (reason: string) => heldRefusals(metrics, reason);
  return { log, held, hold, refusals };
}

/** Holds `count` requests of `holder`; each is still pending. */
function holdMany(hold: (holder: Holder) => Promise<WaitOutcome>, holder: Holder, count: number) {
  return Array.from({ length: count }, () => hold(holder));
}

afterEach(() => {
  vi.useRealTimers();
});

describe('the shares of held sync requests (D27)', () => {
  it("one credential holds its share; one more is refused with 429's error, Retry-After and a reason", async () => {
    const { held, hold, refusals } = heldRequests();
    const waiting = holdMany(hold, ACME_1, 3);
    expect(held.heldBy(ACME_1)).toEqual({ credential: 3, account: 3 });
    let refused: unknown;
    try {
      await hold(ACME_1);
    } catch (error) {
      refused = error;
    }
    expect(refused).toBeInstanceOf(RateLimitError);
    expect(refused).toMatchObject({ retryAfterSeconds: 2 });
    expect((refused as Error).message).toMatch(
      /^This credential already holds 3 sync requests waiting on this instance, as many as one credential may; ask again after Retry-After/,
    );
    expect(await refusals('credential')).toBe(1);
    // Refused, it took nothing.
    expect(held.count).toBe(3);
    expect(held.heldBy(ACME_1)).toEqual({ credential: 3, account: 3 });
    held.drain();
    await Promise.all(waiting);
  });

  it("an account's credentials together hold the account's share; another account's request is still held", async () => {
    const { held, hold, refusals } = heldRequests();
    const waiting = [...holdMany(hold, ACME_1, 3), ...holdMany(hold, ACME_2, 2)];
    expect(() => hold(ACME_3)).toThrow(RateLimitError);
    expect(() => hold(ACME_3)).toThrow(
      /^This account already holds 5 sync requests waiting on this instance/,
    );
    expect(await refusals('account')).toBe(2);
    expect(held.heldBy(ACME_3)).toEqual({ credential: 0, account: 5 });
    // Another account's room is untouched.
    waiting.push(hold(GLOBEX));
    expect(held.count).toBe(6);
    expect(held.heldBy(GLOBEX)).toEqual({ credential: 1, account: 1 });
    held.drain();
    await Promise.all(waiting);
  });

  it("past the instance's room, 503's error; a caller past its own share is told 429 even then", async () => {
    const { held, hold, refusals } = heldRequests({ maxHeld: 4 });
    const waiting = [...holdMany(hold, ACME_1, 3), hold(GLOBEX)];
    expect(() => hold(ACME_2)).toThrow(CapacityError);
    expect(() => hold(ACME_2)).toThrow(/^This instance holds as many waiting sync requests as it may/);
    expect(await refusals('instance')).toBe(2);
    expect(() => hold(ACME_1)).toThrow(RateLimitError);
    expect(held.count).toBe(4);
    held.drain();
    await Promise.all(waiting);
  });

  it("an account's share is a tenth of the instance's room, and never under 20", () => {
    expect(accountShare(1000)).toBe(100);
    expect(accountShare(300)).toBe(30);
    expect(accountShare(100)).toBe(20);
    expect(accountShare(0)).toBe(20);
    const log = new ToldLog();
    const byDefault = new HeldRequests(log, { maxHeld: 300, maxPerCredential: 100 });
    const waiting = Array.from({ length: 30 }, () => byDefault.wait(['acme', 'svc'], 10, 60_000, ACME_1));
    expect(() => byDefault.wait(['acme', 'svc'], 10, 60_000, ACME_2)).toThrow(
      /already holds 30 sync requests/,
    );
    byDefault.drain();
    return Promise.all(waiting);
  });

  it("a credential's requests count against its account's share; a token that acts for no account counts as its user's", () => {
    const principal = (accountId: string | null, credential: Principal['credential']): Principal => ({
      accountId,
      plan: 'free',
      scopes: new Set(['playbook:read']),
      credential,
      restrictions: null,
    });
    expect(holderOf(principal('acme', { kind: 'api-key', keyId: 'k1' }))).toEqual({
      credential: 'key:k1',
      account: 'account:acme',
    });
    const token = {
      kind: 'access-token',
      subject: 'ann',
      accounts: ['acme', 'globex'],
      expiresAt: 0,
    } as const;
    expect(holderOf(principal('acme', token))).toEqual({ credential: 'user:ann', account: 'account:acme' });
    expect(holderOf(principal(null, token))).toEqual({ credential: 'user:ann', account: 'user:ann' });
  });

  describe('a held request gives its place back with its outcome, whatever it is', () => {
    /** Every place `ACME_1` and its account took is free again: the whole share can be held anew. */
    async function expectAllFree(setup: ReturnType<typeof heldRequests>) {
      const { held, hold } = setup;
      expect(held.count).toBe(0);
      expect(held.holders).toBe(0);
      expect(held.heldBy(ACME_1)).toEqual({ credential: 0, account: 0 });
      const again = holdMany(hold, ACME_1, 3);
      expect(held.heldBy(ACME_1)).toEqual({ credential: 3, account: 3 });
      held.drain();
      await Promise.all(again);
    }

    it('a change of its namespaces', async () => {
      const setup = heldRequests();
      const waiting = holdMany(setup.hold, ACME_1, 3);
      setup.log.changed('acme', 11);
      expect(await Promise.all(waiting)).toEqual(Array(3).fill({ kind: 'changed', position: 11 }));
      await expectAllFree(setup);
    });

    it("a change of the service's namespace", async () => {
      const setup = heldRequests();
      const waiting = holdMany(setup.hold, ACME_1, 3);
      setup.log.changed('svc', 11);
      expect((await Promise.all(waiting)).map((outcome) => outcome.kind)).toEqual([
        'changed',
        'changed',
        'changed',
      ]);
      await expectAllFree(setup);
    });

    it('the end of its wait', async () => {
      vi.useFakeTimers();
      const setup = heldRequests();
      const waiting = Array.from({ length: 3 }, () => setup.hold(ACME_1, undefined, 5000));
      expect(setup.held.heldBy(ACME_1).credential).toBe(3);
      await vi.advanceTimersByTimeAsync(5000);
      expect(await Promise.all(waiting)).toEqual(Array(3).fill({ kind: 'timeout' }));
      await expectAllFree(setup);
    });

    it('its client going away', async () => {
      const setup = heldRequests();
      const clients = Array.from({ length: 3 }, () => new AbortController());
      const waiting = clients.map((client) => setup.hold(ACME_1, client.signal));
      for (const client of clients) client.abort();
      expect(await Promise.all(waiting)).toEqual(Array(3).fill({ kind: 'aborted' }));
      await expectAllFree(setup);
    });

    it('the log starting afresh', async () => {
      const setup = heldRequests();
      const waiting = holdMany(setup.hold, ACME_1, 3);
      setup.log.tell({ changes: [], startAfresh: true, seq: 50 });
      expect(await Promise.all(waiting)).toEqual(Array(3).fill({ kind: 'changed', position: undefined }));
      await expectAllFree(setup);
    });

    it('the instance stopping', async () => {
      const setup = heldRequests();
      const waiting = [...holdMany(setup.hold, ACME_1, 3), setup.hold(GLOBEX)];
      setup.held.close();
      expect((await Promise.all(waiting)).map((outcome) => outcome.kind)).toEqual(Array(4).fill('drained'));
      expect(setup.held.count).toBe(0);
      expect(setup.held.holders).toBe(0);
      // Stopping, it holds nothing more, and counts nothing.
      expect(await setup.hold(ACME_1)).toEqual({ kind: 'drained' });
      expect(setup.held.holders).toBe(0);
    });

    it('a refusal, which never took a place', async () => {
      const setup = heldRequests({ maxHeld: 3 });
      const waiting = holdMany(setup.hold, ACME_1, 3);
      expect(() => setup.hold(ACME_1)).toThrow(RateLimitError);
      expect(() => setup.hold(GLOBEX)).toThrow(CapacityError);
      expect(setup.held.heldBy(GLOBEX)).toEqual({ credential: 0, account: 0 });
      expect(setup.held.holders).toBe(2);
      setup.log.changed('acme', 11);
      await Promise.all(waiting);
      await expectAllFree(setup);
    });

    it('each place is given back once: a client that goes away after its request was woken gives back nothing more', async () => {
      const setup = heldRequests();
      const clients = Array.from({ length: 3 }, () => new AbortController());
      const waiting = clients.map((client) => setup.hold(ACME_1, client.signal));
      const other = setup.hold(ACME_2);
      setup.log.changed('acme', 11);
      for (const client of clients) client.abort();
      expect((await Promise.all(waiting)).map((outcome) => outcome.kind)).toEqual(Array(3).fill('changed'));
      expect(await other).toEqual({ kind: 'changed', position: 11 });
      await expectAllFree(setup);
    });

    it('a request that needs no holding takes no place: something changed after its position already', async () => {
      const setup = heldRequests();
      setup.log.changed('acme', 11);
      expect(await setup.held.wait(['acme', 'svc'], 10, 60_000, ACME_1)).toEqual({
        kind: 'changed',
        position: 11,
      });
      expect(setup.held.holders).toBe(0);
    });
  });
});
