import { UnavailableError } from '../foundation/errors.js';
import { UNWATCHED } from '../observability/dependency-health.js';
import { secondsSince } from '../observability/metrics.js';
import type { Observation } from '../observability/observation.js';
import { ContentNotFoundError, type ContentStore } from './content-store.js';

type Operation = 'get' | 'put' | 'delete' | 'check';

/**
 * A content store whose every call is timed into `playbook_content_store_duration_seconds` (D25), by
 * backend, operation and outcome (`ok`, `not_found`, `error`), and tells the store's health whether it
 * answered (D31): an outage is a call that could not reach it, not content it does not hold.
 */
export function observedStore<S extends ContentStore & { close?(): void }>(
  store: S,
  observation: Observation,
): ContentStore & { close?(): void } {
  const { metrics, tracing: traced } = observation;
  const health = observation.health?.contentStore ?? UNWATCHED;
  const timed = <T>(operation: Operation, call: () => Promise<T>): Promise<T> => {
    return traced
      ? traced.span(`contentStore.${operation}`, { 'playbook.content_store': store.backend }, () =>
          measured(operation, call),
        )
      : measured(operation, call);
  };
  const measured = async <T>(operation: Operation, call: () => Promise<T>): Promise<T> => {
    const started = performance.now();
    let outcome = 'error';
    try {
      const result = await call();
      outcome = 'ok';
      health.succeeded();
      return result;
    } catch (error) {
      if (error instanceof ContentNotFoundError) {
        outcome = 'not_found';
        health.succeeded();
      } else if (error instanceof UnavailableError) {
        health.failed(error);
      }
      throw error;
    } finally {
      metrics.contentStoreDuration.observe(
        { backend: store.backend, operation, outcome },
        secondsSince(started),
      );
    }
  };
  return {
    backend: store.backend,
    get: (hash) => timed('get', () => store.get(hash)),
    put: (hash, content) => timed('put', () => store.put(hash, content)),
    delete: (hash) => timed('delete', () => store.delete(hash)),
    check: () => timed('check', () => store.check()),
    ...(store.close ? { close: () => store.close?.() } : {}),
  };
}
