import type { ApiKeyRow, Db } from '../db/tables.js';
import { InputError } from '../foundation/errors.js';
import {
  type KeyUsage,
  type KeyUsageQuery,
  MAX_USAGE_DAYS,
  type UsageGranularity,
} from '../schemas/identity.js';
import type { UsageRecorder } from './usage-recorder.js';
import { OUTCOMES, readUsage, type UsageRow } from './usage-repository.js';

/** A key's usage report (D32): the buckets a query asks for, and the hourly counts summed into them. */

const HOUR_MS = 3_600_000;
const DAY_MS = 24 * HOUR_MS;
/** The range a query without `from` covers: the last 7 days, today's bucket the last. */
const DEFAULT_DAYS = 7;

/** The buckets of a report: each starts at `start + n × step`, before `end`. */
export interface UsageRange {
  readonly granularity: UsageGranularity;
  readonly stepMs: number;
  /** The first bucket's start, and where the buckets end (the last one starts before it). */
  readonly start: number;
  readonly end: number;
}

/**
 * The buckets `query` asks for at `now`: from the one that holds `from` (7 days back by default) to
 * the last that starts before `to` (now by default), none in the future. `from` at most 90 days back,
 * `to` after it, else 400 naming the parameter.
 */
export function usageRange(query: KeyUsageQuery, now: number): UsageRange {
  const granularity = query.granularity ?? 'day';
  const stepMs = granularity === 'hour' ? HOUR_MS : DAY_MS;
  const to = query.to === undefined ? now : Date.parse(query.to);
  const from =
    query.from === undefined
      ? floorTo(now, stepMs) - (DEFAULT_DAYS * DAY_MS - stepMs)
      : Date.parse(query.from);
  if (from < now - MAX_USAGE_DAYS * DAY_MS) {
    throw InputError.of('query', 'from', `must be at most ${MAX_USAGE_DAYS} days back`);
  }
  if (to <= from) throw InputError.of('query', 'to', 'must be after from');
  return { granularity, stepMs, start: floorTo(from, stepMs), end: Math.min(to, now + 1) };
}

/** Every bucket of `range`, counts of zero included, with the hourly `rows` summed into them. */
export function usageBuckets(range: UsageRange, rows: readonly UsageRow[]) {
  const sums = new Map<number, number[]>();
  for (const row of rows) {
    const at = floorTo(Date.parse(row.start), range.stepMs);
    const sum = sums.get(at) ?? OUTCOMES.map(() => 0);
    row.counts.forEach((count, index) => {
      sum[index]! += count;
    });
    sums.set(at, sum);
  }
  const buckets = [];
  for (let start = range.start; start < range.end; start += range.stepMs) {
    const [success = 0, clientError = 0, unauthorized = 0, rateLimited = 0, serverError = 0] =
      sums.get(start) ?? [];
    buckets.push({
      start: new Date(start).toISOString(),
      success,
      clientError,
      unauthorized,
      rateLimited,
      serverError,
    });
  }
  return buckets;
}

function floorTo(at: number, stepMs: number): number {
  return Math.floor(at / stepMs) * stepMs;
}

/**
 * The usage report of the key `row` (D32): what every instance has written, with what `pending` (this
 * instance's recorder) has not written yet, and the later of the stored and the pending last use.
 */
export async function usageReport(
  db: Db,
  row: ApiKeyRow,
  query: KeyUsageQuery,
  now: number,
  pending: UsageRecorder | undefined,
): Promise<KeyUsage> {
  const range = usageRange(query, now);
  const [from, to] = [range.start, range.end].map((at) => new Date(at).toISOString()) as [string, string];
  const rows = [
    ...(await readUsage(db, row.id, from, to)),
    ...(pending?.pendingCounts(row.id) ?? []).filter((hour) => hour.start >= from && hour.start < to),
  ];
  const stored =
    row.last_used_at === null ? undefined : { at: row.last_used_at, address: row.last_used_address };
  const held = pending?.pendingUse(row.id);
  const lastUsed = held && (!stored || stored.at < held.at) ? held : stored;
  return {
    keyId: row.id,
    granularity: range.granularity,
    buckets: usageBuckets(range, rows),
    lastUsed: lastUsed ?? null,
  };
}
