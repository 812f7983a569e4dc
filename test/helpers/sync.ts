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
}

/** The sync feed (D27) as `createServices` composes it: the deployment's keys, over `db`, following `follower`. */
export async function syncParts(
  config: Config,
  db: Db,
  follower: ChangeFollower,
  metrics: Metrics,
  setup: SyncSetup = {},
): Promise<SyncParts> {
  const keys = await loadDeploymentKeys({
    dataDir: config.dataDir,
    databaseKind: config.database.kind,
    ...(config.deploymentKeys ? { keys: config.deploymentKeys } : {}),
  });
  const held = new HeldRequests(follower, { maxHeld: setup.maxHeld ?? config.syncMaxWaiters });
  metrics.observeHeldRequests(() => held.count);
  const feed = new SyncFeed(db, new SyncTokens(keys), {
    retentionS: config.syncRetentionS,
    metrics,
    waits: held,
    ...(setup.now ? { now: setup.now } : {}),
  });
  return { feed, held };
}
