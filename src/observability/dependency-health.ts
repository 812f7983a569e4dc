import type { Metrics } from './metrics.js';

/** The services an instance depends on (D31). */
export type DependencyName = 'database' | 'contentStore' | 'redis';

/** What a dependency's log lines are written with: pino's, or anything shaped like it. */
export interface HealthLogger {
  info(fields: Record<string, unknown>, message: string): void;
  warn(fields: Record<string, unknown>, message: string): void;
}

/** Why an outage began, in a few words, never a stack trace: the error's code, else its message. */
function reasonOf(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const cause = (error as { cause?: unknown }).cause;
  const code = (error as { code?: unknown }).code ?? (cause as { code?: unknown } | undefined)?.code;
  const text = cause instanceof Error ? cause.message : error.message;
  return typeof code === 'string' && !text.includes(code) ? `${code}: ${text}` : text;
}

/**
 * Whether one dependency answers, as every use of it finds (D31): a use that reaches it says so, one
 * that finds it unreachable says so, and the state follows the last of them. Each change is one log
 * line (a warning when it becomes unreachable, naming why and what the instance does meanwhile; an
 * information line when it is back, saying for how long it was out) and the gauge
 * `playbook_dependency_up`, however many requests meet the outage.
 *
 * A dependency with several connections (Redis's) is up while each of its parts is.
 */
export class DependencyHealth {
  private readonly listeners = new Set<(up: boolean) => void>();
  private readonly partsDown = new Map<string, unknown>();
  private downSince: number | undefined;

  constructor(
    readonly name: DependencyName,
    private readonly logger: HealthLogger,
    private readonly metrics: Metrics,
    /** What the instance does while the dependency is out, for the operator reading the warning. */
    private readonly whileDown: string,
    private readonly now: () => number = Date.now,
  ) {
    metrics.dependencyUp.set({ dependency: name }, 1);
  }

  get isUp(): boolean {
    return this.downSince === undefined;
  }

  /** A use of the dependency reached it (or, with `part`, one of its connections is ready). */
  succeeded(part = ''): void {
    this.partsDown.delete(part);
    if (this.downSince === undefined || this.partsDown.size > 0) return;
    const seconds = Math.max(0, (this.now() - this.downSince) / 1000);
    this.downSince = undefined;
    this.metrics.dependencyUp.set({ dependency: this.name }, 1);
    this.logger.info(
      { dependency: this.name, downSeconds: Number(seconds.toFixed(1)) },
      `${this.name} is reachable again`,
    );
    for (const listener of this.listeners) listener(true);
  }

  /** A use found the dependency unreachable (a refused or timed-out connection, an outage answer). */
  failed(error: unknown, part = ''): void {
    this.partsDown.set(part, error);
    if (this.downSince !== undefined) return;
    this.downSince = this.now();
    this.metrics.dependencyUp.set({ dependency: this.name }, 0);
    this.logger.warn(
      { dependency: this.name, reason: reasonOf(error), ...(part ? { part } : {}) },
      `${this.name} is unreachable: ${this.whileDown}`,
    );
    for (const listener of this.listeners) listener(false);
  }

  /** Calls `listener` at each change of state; returns the way to stop. */
  onChange(listener: (up: boolean) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }
}

/** What a use of a dependency observes: its outcome, reported to the dependency's health. */
export interface HealthReport {
  succeeded(part?: string): void;
  failed(error: unknown, part?: string): void;
}

/** A health that observes nothing: parts opened without the service's (commands, tests). */
export const UNWATCHED: HealthReport = { succeeded: () => {}, failed: () => {} };
