import type { Db } from '../../src/db/tables.js';
import type { Config } from '../../src/foundation/config.js';
import { loadDeploymentKeys } from '../../src/foundation/deployment-key.js';
import type { Metrics } from '../../src/observability/metrics.js';
import { SyncFeed } from '../../src/sync/sync-feed.js';
import { SyncTokens } from '../../src/sync/sync-tokens.js';

export interface SyncParts {
  readonly feed: SyncFeed;
}

export interface SyncSetup {
  /** The feed's clock (a test of expired positions moves it). */
  readonly now?: () => number;
}

/** The sync feed (D27) as `createServices` composes it: the deployment's keys, over `db`. */
export async function syncParts(
  config: Config,
  db: Db,
  metrics: Metrics,
  setup: SyncSetup = {},
): Promise<SyncParts> {
  const keys = await loadDeploymentKeys({
    dataDir: config.dataDir,
    databaseKind: config.database.kind,
    ...(config.deploymentKeys ? { keys: config.deploymentKeys } : {}),
  });
  const feed = new SyncFeed(db, new SyncTokens(keys), {
    retentionS: config.syncRetentionS,
    metrics,
    ...(setup.now ? { now: setup.now } : {}),
  });
  return { feed };
}
