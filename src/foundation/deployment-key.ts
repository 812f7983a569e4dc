import { createHash, hkdfSync, randomBytes } from 'node:crypto';
import path from 'node:path';
import { ConfigError, DEPLOYMENT_KEY_BYTES, decodeDeploymentKey, deploymentKeyProblem } from './config.js';
import { readOrCreatePrivateFile } from './private-files.js';

export const DEPLOYMENT_KEY_FILE = 'deployment.key';

/** What a derived key is for: each purpose gets keys of its own, so no use can stand in for another. */
export type KeyPurpose = 'sync-token' | 'webhook-secret';

/** One deployment key: its bytes, and a short public id that sealed values and tokens carry. */
export interface DeploymentKeyVersion {
  readonly id: string;
  derive(purpose: KeyPurpose): Buffer;
}

/**
 * The deployment's own secret, from which the keys that sign what the service hands out (sync tokens)
 * and seal what it must use again (webhook signing secrets) are derived. A secret the service must
 * read back cannot be a hash like an API key's: it is sealed under a key that is not stored beside it.
 *
 * `PLAYBOOK_DEPLOYMENT_KEY` holds one or more keys (base64 of at least 32 bytes, comma-separated): the
 * first signs and seals, every one of them verifies and opens, so a key is replaced by putting the new
 * one first and dropping the old one once nothing sealed under it is left. Without the variable, a
 * key is made once in the data directory (mode 0600) — enough for one machine; instances that share a
 * PostgreSQL database must share the key, so there the variable is required.
 */
export class DeploymentKeys {
  readonly current: DeploymentKeyVersion;
  private readonly byId: ReadonlyMap<string, DeploymentKeyVersion>;

  constructor(keys: readonly Buffer[]) {
    const versions = keys.map(keyVersion);
    const [current] = versions;
    if (current === undefined) throw new Error('a deployment needs at least one key');
    this.current = current;
    this.byId = new Map(versions.map((version) => [version.id, version]));
  }

  /** The key of that id, if this deployment still holds it. */
  find(id: string): DeploymentKeyVersion | undefined {
    return this.byId.get(id);
  }

  /** Every key held, the current one first. */
  all(): DeploymentKeyVersion[] {
    return [...this.byId.values()];
  }
}

function keyVersion(key: Buffer): DeploymentKeyVersion {
  // The id names the key without revealing it: a hash of it, cut short.
  const id = createHash('sha256')
    .update('playbook deployment key id')
    .update(key)
    .digest('base64url')
    .slice(0, 8);
  const derived = new Map<KeyPurpose, Buffer>();
  return {
    id,
    derive(purpose) {
      let bytes = derived.get(purpose);
      if (bytes === undefined) {
        bytes = Buffer.from(hkdfSync('sha256', key, Buffer.alloc(0), `playbook ${purpose} v1`, 32));
        derived.set(purpose, bytes);
      }
      return bytes;
    },
  };
}

const VARIABLE = 'PLAYBOOK_DEPLOYMENT_KEY';

export interface DeploymentKeySource {
  readonly dataDir: string;
  readonly databaseKind: 'sqlite' | 'postgres';
  /** The configured keys, if any (`PLAYBOOK_DEPLOYMENT_KEY`), as written there. */
  readonly keys?: readonly string[];
}

/**
 * The deployment's keys: the configured ones, or on SQLite the key file of the data directory, made on
 * first use. On PostgreSQL a key must be configured: instances that each made their own would refuse
 * each other's tokens.
 */
export async function loadDeploymentKeys(source: DeploymentKeySource): Promise<DeploymentKeys> {
  if (source.keys !== undefined && source.keys.length > 0) {
    return new DeploymentKeys(source.keys.map(decodeDeploymentKey));
  }
  if (source.databaseKind === 'postgres') {
    throw new ConfigError(
      `${VARIABLE} is required with a PostgreSQL database: every instance must hold the same key (make one with: openssl rand -base64 32)`,
    );
  }
  const file = path.join(source.dataDir, DEPLOYMENT_KEY_FILE);
  const text = await readOrCreatePrivateFile(
    file,
    async () => `${randomBytes(DEPLOYMENT_KEY_BYTES).toString('base64')}\n`,
  );
  const key = text.trim();
  if (deploymentKeyProblem(key) !== undefined) {
    throw new ConfigError(`${file} does not hold a deployment key; remove it to have a new one made`);
  }
  return new DeploymentKeys([decodeDeploymentKey(key)]);
}
