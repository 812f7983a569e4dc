import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { Principal } from '../../src/auth/principal.js';
import type { Db } from '../../src/db/tables.js';
import { DeploymentKeys } from '../../src/foundation/deployment-key.js';
import { AuthenticationError, CapacityError, RateLimitError } from '../../src/foundation/errors.js';
import { Metrics } from '../../src/observability/metrics.js';
import type { ChangeWaits, Holder, WaitOutcome } from '../../src/sync/change-waits.js';
import { SyncFeed } from '../../src/sync/sync-feed.js';
import { SyncTokens } from '../../src/sync/sync-tokens.js';

/**
 * How the sync feed (D27) ends a held request, with the waits and the credential check played by
 * the test: the credential is checked again after every wait it answers from (a change, the end of
 * the wait, the instance stopping), and not for a client gone; a request woken by a change it does
 * not see, whose place was taken meanwhile, answers empty rather than refused. Nothing here reads the
 * database: the position is quiet, and the changes told are at it.
 */

const SEQ = 5;
const principal: Principal = {
  accountId: 'acme',
  plan: 'free',
  scopes: new Set(['playbook:read']),
  credential: { kind: 'api-key', keyId: 'k1' },
  restrictions: null,
};

/** Waits that answer as the test scripts them, one outcome (or refusal) per call. */
class ScriptedWaits implements ChangeWaits {
  readonly holders: Holder[] = [];
  constructor(private readonly script: (WaitOutcome | Error)[]) {}

  quietSince(): number {
    return SEQ;
  }

  wait(_namespaces: readonly string[], _after: number, _ms: number, holder: Holder): Promise<WaitOutcome> {
    this.holders.push(holder);
    const next = this.script.shift();
    if (next === undefined) throw new Error('waited once more than scripted');
    if (next instanceof Error) throw next;
    return Promise.resolve(next);
  }
}

function feedWith(script: (WaitOutcome | Error)[], refusal?: AuthenticationError) {
  const waits = new ScriptedWaits(script);
  const metrics = new Metrics();
  let checks = 0;
  const tokens = new SyncTokens(new DeploymentKeys([randomBytes(32)]));
  const feed = new SyncFeed({} as Db, tokens, {
    retentionS: 3600,
    metrics,
    waits,
    credentials: {
      recheck: async () => {
        checks++;
        if (refusal) throw refusal;
      },
    },
  });
  const syncToken = tokens.seal({
    kind: 'sync',
    view: { accountId: 'acme', plan: 'free', restrictions: null },
    seq: SEQ,
  });
  return {
    waits,
    metrics,
    checks: () => checks,
    read: () => feed.read(principal, { syncToken, wait: 30 }),
    syncToken,
  };
}

const refusal = () =>
  new RateLimitError('This credential already holds 20 sync requests waiting on this instance', 2);

describe('a held request of the sync feed, as it ends (D27)', () => {
  it.each([
    ['the end of its wait', { kind: 'timeout' }],
    ['the instance stopping', { kind: 'drained' }],
  ] as const)('checks its credential again at %s, then answers empty at its position', async (_, outcome) => {
    const setup = feedWith([outcome]);
    expect(await setup.read()).toEqual({ data: [], nextSyncToken: setup.syncToken });
    expect(setup.checks()).toBe(1);
    expect(setup.waits.holders).toEqual([{ credential: 'key:k1', account: 'account:acme' }]);
  });

  it('does not check a credential whose client went away: nobody is answered', async () => {
    const setup = feedWith([{ kind: 'aborted' }]);
    expect(await setup.read()).toEqual({ data: [], nextSyncToken: setup.syncToken });
    expect(setup.checks()).toBe(0);
  });

  it("refuses with the check's 401, counted, when the credential is no longer accepted", async () => {
    const setup = feedWith(
      [{ kind: 'changed', position: SEQ }],
      new AuthenticationError('the API key has been revoked', 'revoked'),
    );
    await expect(setup.read()).rejects.toThrow('the API key has been revoked');
    expect(await setup.metrics.registry.metrics()).toMatch(
      /^playbook_sync_held_refusals_total\{reason="unauthenticated"\} 1$/m,
    );
  });

  it('checks again at each wake: a change it does not see, then the end of its wait', async () => {
    const setup = feedWith([{ kind: 'changed', position: SEQ }, { kind: 'timeout' }]);
    expect(await setup.read()).toEqual({ data: [], nextSyncToken: setup.syncToken });
    expect(setup.checks()).toBe(2);
  });

  it('a request refused before it was ever held is refused (429 or 503)', async () => {
    await expect(feedWith([refusal()]).read()).rejects.toBeInstanceOf(RateLimitError);
    await expect(feedWith([new CapacityError('This instance holds as many')]).read()).rejects.toBeInstanceOf(
      CapacityError,
    );
  });

  it('a request woken by a change it does not see, whose place was taken meanwhile, answers empty', async () => {
    for (const taken of [refusal(), new CapacityError('This instance holds as many')]) {
      const setup = feedWith([{ kind: 'changed', position: SEQ }, taken]);
      expect(await setup.read()).toEqual({ data: [], nextSyncToken: setup.syncToken });
      expect(setup.waits.holders).toHaveLength(2);
    }
  });
});
