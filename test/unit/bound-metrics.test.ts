import { Counter, Histogram, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import {
  BoundCounter,
  BoundHistogram,
  Metrics,
  startMetricsServer,
} from '../../src/observability/metrics.js';

const BUCKETS = [0.001, 0.01, 0.1, 1];
const LABELS = ['operation', 'status'] as const;

/** The same observations, through prom-client's own metrics and through the bound ones. */
function pair(recording = { on: true }) {
  const theirs = new Registry();
  const ours = new Registry();
  return {
    recording,
    theirs,
    ours,
    counter: new Counter({ name: 'c_total', help: 'c', labelNames: LABELS, registers: [theirs] }),
    boundCounter: new BoundCounter(
      { name: 'c_total', help: 'c', labelNames: LABELS, registers: [ours] },
      recording,
    ),
    histogram: new Histogram({
      name: 'h_seconds',
      help: 'h',
      labelNames: LABELS,
      buckets: BUCKETS,
      registers: [theirs],
    }),
    boundHistogram: new BoundHistogram(
      {
        name: 'h_seconds',
        help: 'h',
        labelNames: LABELS,
        buckets: BUCKETS,
        registers: [ours],
      },
      recording,
    ),
  };
}

/**
 * D25: the series every request records are bound once and count by plain addition, and only while
 * their metrics are recorded (from the moment the metrics listener opens).
 */
describe('bound metrics (D25)', () => {
  it('records nothing until the metrics listener opens, and from then on', async () => {
    const { ours, boundCounter, boundHistogram } = pair({ on: false });
    boundCounter.bind({ operation: 'a', status: '200' }).inc();
    boundHistogram.bind({ operation: 'a', status: '200' }).observe(0.002);
    const text = await ours.metrics();
    expect(text).not.toMatch(/^c_total\{/m);
    expect(text).not.toMatch(/^h_seconds_count\{/m);

    const metrics = new Metrics();
    const series = metrics.answerCacheLookups.bind({ result: 'hit' });
    series.inc();
    expect(await metrics.registry.metrics()).not.toMatch(/^playbook_answer_cache_lookups_total\{/m);
    const listener = await startMetricsServer(metrics, { port: 0, host: '127.0.0.1' });
    try {
      series.inc();
      expect(await metrics.registry.metrics()).toMatch(
        /^playbook_answer_cache_lookups_total\{result="hit"\} 1$/m,
      );
    } finally {
      await listener.close();
    }
  });

  it("renders exactly what prom-client's own counter and histogram render for the same observations", async () => {
    {
      const { theirs, ours, counter, boundCounter, histogram, boundHistogram } = pair();
      const series = [
        { operation: 'a', status: '200' },
        { operation: 'b', status: '404' },
      ];
      const bound = series.map((labels) => ({
        count: boundCounter.bind(labels),
        duration: boundHistogram.bind(labels),
      }));
      // On and between bucket bounds, below the first and past the last.
      const values = [0.0005, 0.001, 0.004, 0.01, 0.05, 0.1, 0.7, 1, 3];
      for (const [i, value] of values.entries()) {
        const which = i % 2;
        counter.inc(series[which]!);
        histogram.observe(series[which]!, value);
        bound[which]!.count.inc();
        bound[which]!.duration.observe(value);
      }
      expect(await ours.metrics()).toBe(await theirs.metrics());
      // Counts accumulate across scrapes; they are handed over once, not twice.
      bound[0]!.count.inc();
      counter.inc(series[0]!);
      expect(await ours.metrics()).toBe(await theirs.metrics());
      expect(await ours.metrics()).toBe(await theirs.metrics());
      expect(await ours.getMetricsAsJSON()).toEqual(await theirs.getMetricsAsJSON());
    }
  });

  it('forgets the bound series on reset, as prom-client does its own, counted or not yet handed over', async () => {
    const { ours, boundCounter, boundHistogram } = pair();
    const count = boundCounter.bind({ operation: 'a', status: '200' });
    count.inc();
    boundHistogram.bind({ operation: 'a', status: '200' }).observe(0.5);
    expect(await ours.metrics()).toMatch(/^h_seconds_count\{operation="a",status="200"\} 1$/m);
    expect(await ours.metrics()).toMatch(/^c_total\{operation="a",status="200"\} 1$/m);
    count.inc(); // not scraped yet when the reset comes
    ours.resetMetrics();
    const text = await ours.metrics();
    expect(text).not.toMatch(/^h_seconds_count/m);
    expect(text).not.toMatch(/^c_total\{/m);
  });

  it('refuses a label the metric does not have when the series is bound, not at every scrape', () => {
    const { boundCounter, boundHistogram } = pair();
    const wrong = { operation: 'a', stauts: '200' } as unknown as { operation: string; status: string };
    expect(() => boundCounter.bind(wrong)).toThrow('no label "stauts"');
    expect(() => boundHistogram.bind(wrong)).toThrow('no label "stauts"');
  });
});
