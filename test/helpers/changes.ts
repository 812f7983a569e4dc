import { type Change, readChangesAfter } from '../../src/changes/change-log.js';
import type { Db } from '../../src/db/tables.js';

/** Every change of the log, in order; those of `namespace` alone when given. */
export async function loggedChanges(db: Db, namespace?: string): Promise<Change[]> {
  const changes = await readChangesAfter(db, 0, 1_000_000);
  return namespace === undefined ? changes : changes.filter((change) => change.namespace === namespace);
}
