import type { Histogram, LabelValues } from 'prom-client';

/** How many uses a histogram timed under one set of labels, and their seconds in all. */
export interface TimedUses {
  readonly count: number;
  readonly seconds: number;
}

/**
 * A histogram's series, each named by the values of `labels` joined by a space (`get error`), those
 * `keep` refuses left out. A series not timed yet is absent: read it with `usesOf`.
 *
 * @example
 * const uses = await timedUses(metrics.redisDuration, ['operation', 'outcome']);
 * usesOf(uses, 'connect error').count;
 */
export async function timedUses<T extends string>(
  histogram: Histogram<T>,
  labels: readonly T[],
  keep: (values: LabelValues<T>) => boolean = () => true,
): Promise<Record<string, TimedUses>> {
  const uses: Record<string, { count: number; seconds: number }> = {};
  for (const { metricName, labels: values, value } of (await histogram.get()).values) {
    if (!keep(values)) continue;
    const key = labels.map((label) => values[label]).join(' ');
    uses[key] ??= { count: 0, seconds: 0 };
    if (metricName?.endsWith('_count')) uses[key].count = value;
    if (metricName?.endsWith('_sum')) uses[key].seconds = value;
  }
  return uses;
}

/** The uses under `key`: none when the series was never timed. */
export function usesOf(uses: Record<string, TimedUses>, key: string): TimedUses {
  return uses[key] ?? { count: 0, seconds: 0 };
}
