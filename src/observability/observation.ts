import { Metrics } from './metrics.js';
import type { Tracing } from './tracing.js';

/**
 * Where storage calls are timed and traced (D25): the service's metrics, and its tracing when
 * OpenTelemetry is on. Made once by the composition root and handed to each store it opens.
 */
export interface Observation {
  readonly metrics: Metrics;
  readonly tracing?: Tracing | undefined;
}

/** What a part opened without the service's observation records into: metrics of its own, no spans. */
export function unobserved(): Observation {
  return { metrics: new Metrics() };
}
