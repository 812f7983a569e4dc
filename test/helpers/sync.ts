import { expect } from 'vitest';
import type { CredentialCheck } from '../../src/auth/principal.js';
import type { ChangeFollower } from '../../src/changes/change-follower.js';
import type { Db } from '../../src/db/tables.js';
import type { Config } from '../../src/foundation/config.js';
import { loadDeploymentKeys } from '../../src/foundation/deployment-key.js';
import type { Metrics } from '../../src/observability/metrics.js';
import { HeldRequests } from '../../src/sync/held-requests.js';
import { SyncFeed } from '../../src/sync/sync-feed.js';
import { SyncTokens } from '../../src/sync/sync-tokens.js';

export interface SyncParts {
  readonly feed: SyncFeed;
  readonly held: HeldRequests;
}

export interface SyncSetup {
  /** The feed's clock (a test of expired positions moves it). */
  readonly now?: () => number;
  /** Requests held at once; the configuration's by default. */
  readonly maxHeld?: number;
  /** Requests one credential holds at once; the configuration's by default. */
  readonly maxPerCredential?: number;
  /** Requests one account holds at once; the share of `maxHeld` by default. */
  readonly maxPerAccount?: number;
}

/**
 * The sync feed (D27) as `createServices` composes it: the deployment's keys, over `db`, following
 * `follower`, a held request's credential checked again by `credentials`.
 */
export async function syncParts(
  config: Config,
  db: Db,
  follower: ChangeFollower,
  metrics: Metrics,
  credentials: CredentialCheck,
  setup: SyncSetup = {},
): Promise<SyncParts> {
  const keys = await loadDeploymentKeys({
    dataDir: config.dataDir,
    databaseKind: config.database.kind,
    ...(config.deploymentKeys ? { keys: config.deploymentKeys } : {}),
  });
  const held = new HeldRequests(follower, {
    maxHeld: setup.maxHeld ?? config.syncMaxWaiters,
    maxPerCredential: setup.maxPerCredential ?? config.syncMaxWaitersPerKey,
    ...(setup.maxPerAccount === undefined ? {} : { maxPerAccount: setup.maxPerAccount }),
    metrics,
  });
  metrics.observeHeldRequests(() => held.count);
  const feed = new SyncFeed(db, new SyncTokens(keys), {
    retentionS: config.syncRetentionS,
    metrics,
    waits: held,
    credentials,
    ...(setup.now ? { now: setup.now } : {}),
  });
  return { feed, held };
}

/** Sync requests with wait refused for `reason` (D27), as `/metrics` counts them. */
export async function heldRefusals(metrics: Metrics, reason: string): Promise<number> {
  const text = await metrics.registry.metrics();
  const match = new RegExp(`^playbook_sync_held_refusals_total\\{reason="${reason}"\\} (\\d+)$`, 'm').exec(
    text,
  );
  return match ? Number(match[1]) : 0;
}

/** Every request held has had its outcome: none is held, and no credential or account counts one. */
export function expectNothingHeld(held: HeldRequests): void {
  expect(held.count).toBe(0);
  expect(held.holders).toBe(0);
}
