import type { HealthReport } from './dependency-health.js';
import { Metrics } from './metrics.js';
import type { Tracing } from './tracing.js';

/**
 * Where storage calls are timed and traced (D25): the service's metrics, and its tracing when
 * OpenTelemetry is on. Made once by the composition root and handed to each store it opens.
 */
export interface Observation {
  readonly metrics: Metrics;
  readonly tracing?: Tracing | undefined;
  /**
   * Where each use of a dependency reports whether it reached it (D31): the health of the service's
   * database and content store, when the composition root watches them.
   */
  readonly health?: { readonly database: HealthReport; readonly contentStore: HealthReport } | undefined;
}

/** What a part opened without the service's observation records into: metrics of its own, no spans. */
export function unobserved(): Observation {
  return { metrics: new Metrics() };
}
