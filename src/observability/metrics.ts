import http from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  Counter,
  type CounterConfiguration,
  collectDefaultMetrics,
  Gauge,
  Histogram,
  type HistogramConfiguration,
  type LabelValues,
  type MetricObjectWithValues,
  type MetricValueWithName,
  Registry,
} from 'prom-client';

/**
 * The service's metrics (D25), in one registry of this process, named by Prometheus conventions:
 * `playbook_` prefix, base units (seconds, bytes), `_total` counters. Every label value comes from a
 * small fixed set (an operation id, a status code, a reason word), never from a path, a key or an
 * account, so that no caller can grow the series.
 *
 * What every request records (its count and duration, its credential's outcome, its answer-cache
 * lookup) goes through series bound once (`BoundCounter`, `BoundHistogram`), whose recording is a
 * plain addition, and only once `PLAYBOOK_METRICS_PORT` has opened the registry's listener
 * (`startMetricsServer`): prom-client's own `inc` and `observe` hash and check their labels on every
 * call, which under load cost several per cent of a read answered from memory. The rest (storage
 * calls, refusals, writes) is rarer than a request and records through prom-client as it is.
 */
/** Whether a set of metrics is being recorded: from the moment its listener starts. */
export interface Recording {
  on: boolean;
}

/**
 * A bound series' labels are checked once, when it is bound, as prom-client checks them on every
 * call: a wrong one would otherwise fail every scrape from then on.
 */
function checkLabels(labelNames: readonly string[], labels: object): void {
  for (const name of Object.keys(labels)) {
    if (!labelNames.includes(name)) throw new Error(`no label "${name}" on this metric`);
  }
}

/** One series of a `BoundCounter`: counts in a number, handed to prom-client when it collects. */
export class CountedSeries<T extends string> {
  pending = 0;
  constructor(
    readonly labels: LabelValues<T>,
    private readonly recording: Recording,
  ) {}

  inc(): void {
    if (this.recording.on) this.pending++;
  }
}

/**
 * A counter whose hot series are bound once (`bind`): counting one is an addition, and the sums are
 * added to the counter when the registry collects it. Series counted with `inc(labels)` work as usual.
 */
export class BoundCounter<T extends string> extends Counter<T> {
  private readonly series: CountedSeries<T>[] = [];
  private readonly labelNames: readonly string[];

  constructor(
    configuration: Omit<CounterConfiguration<T>, 'collect'>,
    private readonly recording: Recording,
  ) {
    super({
      ...configuration,
      collect() {
        (this as BoundCounter<T>).handOver();
      },
    });
    this.labelNames = configuration.labelNames ?? [];
  }

  bind(labels: LabelValues<T>): CountedSeries<T> {
    checkLabels(this.labelNames, labels);
    const series = new CountedSeries(labels, this.recording);
    this.series.push(series);
    return series;
  }

  override reset(): void {
    super.reset();
    // prom-client's constructor resets too, before this class's fields exist.
    for (const series of (this.series as CountedSeries<T>[] | undefined) ?? []) series.pending = 0;
  }

  private handOver(): void {
    for (const series of this.series) {
      if (series.pending === 0) continue;
      this.inc(series.labels, series.pending);
      series.pending = 0;
    }
  }
}

/** A histogram's value as prom-client hands it to the registry: the series' labels are shared. */
interface SharedLabelsValue<T extends string> {
  readonly metricName: string;
  readonly labels: { le?: number | string };
  readonly sharedLabels: LabelValues<T>;
  readonly value: number;
  /** Buckets carry one (none here), as prom-client's own do. */
  readonly exemplar?: null;
}

interface PromStringSource<T extends string> {
  getForPromString(this: Histogram<T>): Promise<unknown>;
}

/** One series of a `BoundHistogram`: its buckets' counts (not cumulative), sum and count. */
export class ObservedSeries<T extends string> {
  readonly counts: number[];
  sum = 0;
  count = 0;

  constructor(
    readonly labels: LabelValues<T>,
    private readonly upperBounds: readonly number[],
    private readonly recording: Recording,
  ) {
    this.counts = new Array<number>(upperBounds.length).fill(0);
  }

  observe(value: number): void {
    if (!this.recording.on) return;
    this.sum += value;
    this.count++;
    const bounds = this.upperBounds;
    for (let i = 0; i < bounds.length; i++) {
      if (value <= bounds[i]!) {
        this.counts[i]!++;
        return;
      }
    }
  }
}

/**
 * A histogram of series bound once (`bind`): observing one is a few additions, and the series are
 * rendered by this class as prom-client renders its own (`le` first, cumulative buckets, `+Inf`, `_sum`,
 * `_count`). Series observed with `observe(labels, value)` are rendered beside them as usual.
 */
export class BoundHistogram<T extends string> extends Histogram<T> {
  private readonly series: ObservedSeries<T>[] = [];
  private readonly bounds: readonly number[];
  private readonly metricName: string;
  private readonly labelNames: readonly string[];

  constructor(
    configuration: HistogramConfiguration<T> & { buckets: readonly number[] },
    private readonly recording: Recording,
  ) {
    super({ ...configuration, buckets: [...configuration.buckets] });
    this.bounds = [...configuration.buckets].sort((a, b) => a - b);
    this.metricName = configuration.name;
    this.labelNames = configuration.labelNames ?? [];
  }

  bind(labels: LabelValues<T>): ObservedSeries<T> {
    checkLabels(this.labelNames, labels);
    const series = new ObservedSeries(labels, this.bounds, this.recording);
    this.series.push(series);
    return series;
  }

  /**
   * What the registry renders the text format from (and prom-client's `get` too): the histogram's
   * own series, then the bound ones, in the same form (`le` as the label, the series' labels shared).
   */
  async getForPromString(): Promise<MetricObjectWithValues<MetricValueWithName<T>>> {
    // prom-client declares the method on its histogram but not in its types.
    const own = (await (Histogram.prototype as unknown as PromStringSource<T>).getForPromString.call(
      this,
    )) as MetricObjectWithValues<MetricValueWithName<T>>;
    return { ...own, values: [...own.values, ...this.boundValues()] };
  }

  override reset(): void {
    super.reset();
    // prom-client's constructor resets too, before this class's fields exist.
    for (const series of (this.series as ObservedSeries<T>[] | undefined) ?? []) {
      series.counts.fill(0);
      series.sum = 0;
      series.count = 0;
    }
  }

  private boundValues(): MetricValueWithName<T>[] {
    const values: SharedLabelsValue<T>[] = [];
    const bucket = `${this.metricName}_bucket`;
    for (const series of this.series) {
      if (series.count === 0) continue;
      const sharedLabels = series.labels;
      let cumulative = 0;
      for (const [i, upperBound] of this.bounds.entries()) {
        cumulative += series.counts[i]!;
        values.push({
          metricName: bucket,
          labels: { le: upperBound },
          sharedLabels,
          value: cumulative,
          exemplar: null,
        });
      }
      values.push(
        { metricName: bucket, labels: { le: '+Inf' }, sharedLabels, value: series.count, exemplar: null },
        { metricName: `${this.metricName}_sum`, labels: {}, sharedLabels, value: series.sum },
        { metricName: `${this.metricName}_count`, labels: {}, sharedLabels, value: series.count },
      );
    }
    return values as unknown as MetricValueWithName<T>[];
  }
}

/** From a tenth of a millisecond (a read from memory) to ten seconds (an import step). */
const LATENCY_BUCKETS = [
  0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
];

type PoolState = { totalCount: number; idleCount: number; waitingCount: number };

/**
 * The service's metrics: one registry and its series, made once by the composition root
 * (`createStorage`) and handed to every part that records. A part made without them (a test's) records
 * into metrics of its own, which nobody reads.
 */
export class Metrics {
  readonly registry = new Registry();
  /** Off until the metrics listener starts (`startMetricsServer`): bound series cost nothing before. */
  readonly recording: Recording = { on: false };
  /** Whether the process metrics (CPU, memory, event-loop delay) are collected into this registry. */
  processMetrics = false;

  readonly httpRequests: BoundCounter<'operation' | 'method' | 'status'>;
  readonly httpDuration: BoundHistogram<'operation' | 'method' | 'status'>;
  readonly authentications: BoundCounter<'kind' | 'outcome' | 'reason'>;
  readonly rateLimitRefusals: Counter<'limit'>;
  readonly answerCacheLookups: BoundCounter<'result'>;
  readonly contentStoreDuration: Histogram<'backend' | 'operation' | 'outcome'>;
  readonly databaseDuration: Histogram<'database' | 'outcome'>;
  readonly redisDuration: Histogram<'operation' | 'outcome'>;
  readonly catalogWrites: Counter<'via' | 'outcome'>;
  readonly catalogWriteDuration: Histogram<'via'>;
  readonly writeTransactions: Counter<'write' | 'outcome'>;
  readonly changesAppended: Counter<'type'>;
  readonly changeLogPosition: Gauge;
  readonly dependencyUp: Gauge<'dependency'>;
  readonly syncPages: BoundCounter<'kind'>;
  readonly syncHeldRefusals: Counter<'reason'>;
  readonly webhookAttempts: Counter<'outcome' | 'reason'>;
  readonly webhookAttemptDuration: Histogram;
  readonly webhookDeliveries: Counter<'outcome'>;

  /** What reports the requests held waiting for a change (D27). */
  private heldRequests: (() => number) | undefined;
  /** Caches whose size a gauge reports, registered as they are made. */
  private readonly cacheSizes = new Set<() => number>();
  /** Connection pools whose use the gauges report: PostgreSQL's, by role. */
  private readonly pools = new Map<string, PoolState>();
  /** The Redis connection a gauge reports on. */
  private redisStatus: (() => boolean) | undefined;
  /** How old the oldest webhook delivery not yet made is, asked when scraped. */
  private webhookBacklog: (() => Promise<number>) | undefined;

  constructor() {
    const registers = [this.registry];
    const recording = this.recording;
    this.httpRequests = new BoundCounter(
      {
        name: 'playbook_http_requests_total',
        help: 'HTTP requests answered, by operation id, method and status',
        labelNames: ['operation', 'method', 'status'] as const,
        registers,
      },
      recording,
    );
    this.httpDuration = new BoundHistogram(
      {
        name: 'playbook_http_request_duration_seconds',
        help: 'Time from the request to the end of its answer, by operation id, method and status',
        labelNames: ['operation', 'method', 'status'] as const,
        buckets: LATENCY_BUCKETS,
        registers,
      },
      recording,
    );
    this.authentications = new BoundCounter(
      {
        name: 'playbook_authentications_total',
        help: 'Credentials checked, by kind (api_key, access_token, none), outcome and reason of a refusal',
        labelNames: ['kind', 'outcome', 'reason'] as const,
        registers,
      },
      recording,
    );
    this.rateLimitRefusals = new Counter({
      name: 'playbook_rate_limit_refusals_total',
      help: 'Requests refused with 429, by limit: per credential, or failed authentications per address',
      labelNames: ['limit'] as const,
      registers,
    });
    this.answerCacheLookups = new BoundCounter(
      {
        name: 'playbook_answer_cache_lookups_total',
        help: 'Lookups of read answers kept in memory, by result (hit or miss)',
        labelNames: ['result'] as const,
        registers,
      },
      recording,
    );
    const cacheSizes = this.cacheSizes;
    new Gauge({
      name: 'playbook_answer_cache_bytes',
      help: 'Bytes of read answers kept in memory, compressed forms included',
      registers,
      collect() {
        let total = 0;
        for (const size of cacheSizes) total += size();
        this.set(total);
      },
    });
    this.contentStoreDuration = new Histogram({
      name: 'playbook_content_store_duration_seconds',
      help: 'Calls to the content stores, by backend, operation and outcome',
      labelNames: ['backend', 'operation', 'outcome'] as const,
      buckets: LATENCY_BUCKETS,
      registers,
    });
    this.databaseDuration = new Histogram({
      name: 'playbook_database_query_duration_seconds',
      help: 'Database statements, by database (primary, reader) and outcome',
      labelNames: ['database', 'outcome'] as const,
      buckets: LATENCY_BUCKETS,
      registers,
    });
    this.redisDuration = new Histogram({
      name: 'playbook_redis_duration_seconds',
      help: 'Uses of Redis, by operation (connect, count: a rate-limit hit, publish, subscribe, ping) and outcome (ok, error); a connection that cannot be opened is a failed connect',
      labelNames: ['operation', 'outcome'] as const,
      buckets: LATENCY_BUCKETS,
      registers,
    });
    const pools = this.pools;
    new Gauge({
      name: 'playbook_database_pool_connections_in_use',
      help: 'PostgreSQL connections lent out, by database',
      labelNames: ['database'] as const,
      registers,
      collect() {
        for (const [role, pool] of pools) this.set({ database: role }, pool.totalCount - pool.idleCount);
      },
    });
    new Gauge({
      name: 'playbook_database_pool_waiting_requests',
      help: 'Queries waiting for a PostgreSQL connection, by database',
      labelNames: ['database'] as const,
      registers,
      collect() {
        for (const [role, pool] of pools) this.set({ database: role }, pool.waitingCount);
      },
    });
    const redisStatus = () => this.redisStatus;
    new Gauge({
      name: 'playbook_redis_connected',
      help: '1 while the shared Redis connection is ready, 0 while it is not; absent without Redis',
      registers,
      collect() {
        const connected = redisStatus();
        if (connected) this.set(connected() ? 1 : 0);
      },
    });
    this.catalogWrites = new Counter({
      name: 'playbook_catalog_writes_total',
      help: 'Imports and publications, by way in (import, publish) and outcome (changed, unchanged, refused, failed)',
      labelNames: ['via', 'outcome'] as const,
      registers,
    });
    this.catalogWriteDuration = new Histogram({
      name: 'playbook_catalog_write_duration_seconds',
      help: 'Time to validate, plan and apply an import or a publication, by way in',
      labelNames: ['via'] as const,
      buckets: [0.001, 0.005, 0.025, 0.1, 0.5, 1, 5, 15, 60, 300],
      registers,
    });
    this.writeTransactions = new Counter({
      name: 'playbook_write_transactions_total',
      help: 'Transactions of the unit of work every write passes through, by write and outcome (committed, conflict: tried again, busy: given up with 503, failed)',
      labelNames: ['write', 'outcome'] as const,
      registers,
    });
    this.changesAppended = new Counter({
      name: 'playbook_changes_appended_total',
      help: 'Changes appended to the change log by writes of this instance, by type',
      labelNames: ['type'] as const,
      registers,
    });
    this.changeLogPosition = new Gauge({
      name: 'playbook_change_log_seq',
      help: 'The last change of the log this instance has followed (its answers in memory reflect it)',
      registers,
    });
    this.webhookAttempts = new Counter({
      name: 'playbook_webhook_attempts_total',
      help: 'Webhook delivery attempts, by outcome (succeeded, failed) and reason of a failure (status, redirect, timeout, network, address)',
      labelNames: ['outcome', 'reason'] as const,
      registers,
    });
    this.webhookAttemptDuration = new Histogram({
      name: 'playbook_webhook_attempt_duration_seconds',
      help: 'Time of one webhook delivery attempt, connection included',
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
      registers,
    });
    this.webhookDeliveries = new Counter({
      name: 'playbook_webhook_deliveries_total',
      help: 'Webhook deliveries finished, by outcome: succeeded, or failed once every retry had failed or past the bound on what is pending to its endpoint',
      labelNames: ['outcome'] as const,
      registers,
    });
    const webhookBacklog = () => this.webhookBacklog;
    new Gauge({
      name: 'playbook_webhook_oldest_pending_seconds',
      help: 'Age of the oldest webhook delivery due to an enabled endpoint and not yet made (0 when none)',
      registers,
      async collect() {
        const age = webhookBacklog();
        if (age) this.set(await age().catch(() => Number.NaN));
      },
    });
    this.dependencyUp = new Gauge({
      name: 'playbook_dependency_up',
      help: '1 while a dependency (database, contentStore, redis) answers this instance, 0 while it does not',
      labelNames: ['dependency'] as const,
      registers,
    });
    this.syncPages = new BoundCounter(
      {
        name: 'playbook_sync_pages_total',
        help: 'Pages of the sync feed served, by kind: initial (of an initial sync), delta (changes), empty (nothing changed)',
        labelNames: ['kind'] as const,
        registers,
      },
      recording,
    );
    this.syncHeldRefusals = new Counter({
      name: 'playbook_sync_held_refusals_total',
      help: 'Sync requests with wait refused, by reason: credential or account (past its share, 429), instance (past the room of the instance, 503), unauthenticated (the credential was no longer accepted when a held request was to answer, 401)',
      labelNames: ['reason'] as const,
      registers,
    });
    const heldRequests = () => this.heldRequests;
    new Gauge({
      name: 'playbook_sync_held_requests',
      help: 'Sync requests this instance holds waiting for a change',
      registers,
      collect() {
        this.set(heldRequests()?.() ?? 0);
      },
    });
  }

  /** Reports the size of a cache of answers; returns the way to stop. */
  observeAnswerCacheSize(size: () => number): () => void {
    this.cacheSizes.add(size);
    return () => this.cacheSizes.delete(size);
  }

  /** Reports the use of a PostgreSQL pool, by its role (primary, reader). */
  observePool(role: string, pool: PoolState): void {
    this.pools.set(role, pool);
  }

  /** Reports how many sync requests are held waiting for a change (D27). */
  observeHeldRequests(count: () => number): void {
    this.heldRequests = count;
  }

  /** Reports the age of the oldest webhook delivery not yet made; returns the way to stop. */
  observeWebhookBacklog(age: () => Promise<number>): () => void {
    this.webhookBacklog = age;
    return () => {
      if (this.webhookBacklog === age) this.webhookBacklog = undefined;
    };
  }

  /** Reports whether the shared Redis connection is ready. */
  observeRedis(connected: () => boolean): void {
    this.redisStatus = connected;
  }
}

/** Seconds since `started` (a `performance.now()` reading). */
export function secondsSince(started: number): number {
  return (performance.now() - started) / 1000;
}

/**
 * Serves `GET /metrics` in the Prometheus text format on a listener of its own, never on the API's
 * port. Also starts the process metrics (CPU, memory, event-loop delay), which only cost something
 * once someone reads them.
 */
export async function startMetricsServer(
  metrics: Metrics,
  options: { port: number; host: string },
): Promise<{
  address: string;
  close(): Promise<void>;
}> {
  const { registry } = metrics;
  metrics.recording.on = true;
  if (!metrics.processMetrics) {
    collectDefaultMetrics({ register: registry, eventLoopMonitoringPrecision: 10 });
    metrics.processMetrics = true;
  }
  const server = http.createServer((request, response) => {
    const path = (request.url ?? '').split('?')[0];
    if (request.method !== 'GET' || path !== '/metrics') {
      response.writeHead(404, { 'content-type': 'text/plain' }).end('not found: GET /metrics\n');
      return;
    }
    registry.metrics().then(
      (text) => response.writeHead(200, { 'content-type': registry.contentType }).end(text),
      () => response.writeHead(500).end(),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.host, resolve);
  });
  const { address, port } = server.address() as AddressInfo;
  return {
    address: `http://${address.includes(':') ? `[${address}]` : address}:${port}`,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
