import { type Change, readChangesAfter } from '../../src/changes/change-log.js';
import type { Db } from '../../src/db/tables.js';
import type { Metrics } from '../../src/observability/metrics.js';

/** Every change of the log, in order; those of `namespace` alone when given. */
export async function loggedChanges(db: Db, namespace?: string): Promise<Change[]> {
  const changes = await readChangesAfter(db, 0, 1_000_000);
  return namespace === undefined ? changes : changes.filter((change) => change.namespace === namespace);
}

/** A write of the command line, as the unit of work is told of it. */
export const OPERATOR = { actor: { type: 'operator' } } as const;

/** One change of an account, as a write appends it. */
export function accountChange(namespace: string) {
  return {
    namespace,
    type: 'account.plan_changed',
    target: { kind: 'account', id: namespace },
    summary: 'made by a test',
  } as const;
}

/**
 * What a unit of work counted (D26): its transactions as `write outcome`, and the changes of its
 * commits by type, each with its count; series never counted are absent.
 */
export async function writeCounts(metrics: Metrics): Promise<Record<string, number>> {
  const counts: Record<string, number> = {};
  for (const { labels, value } of (await metrics.writeTransactions.get()).values) {
    if (value !== 0) counts[`${labels.write} ${labels.outcome}`] = value;
  }
  for (const { labels, value } of (await metrics.changesAppended.get()).values) {
    if (value !== 0) counts[`${labels.type}`] = value;
  }
  return counts;
}
