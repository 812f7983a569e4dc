import type dns from 'node:dns';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import pino from 'pino';
import { buildApp } from '../../src/composition/app.js';
import { createServices, type Services, type ServicesOptions } from '../../src/composition/services.js';
import { loadConfig } from '../../src/foundation/config.js';
import type { TestBackend } from './backend.js';
import { publishedResource } from './publish-bodies.js';

/** A request a receiver got: what a webhook consumer would see. */
export interface Received {
  /** The path it was sent to: one receiver serves several endpoints, one per path. */
  readonly path: string;
  readonly id: string;
  readonly headers: Record<string, string>;
  readonly body: string;
  readonly at: number;
}

/** What the receiver answers a request with (the default: 204 at once). */
export type ReceiverBehaviour = (
  request: Received,
  attempt: number,
) => {
  status?: number;
  headers?: Record<string, string>;
  /** Held this long before answering. */
  delayMs?: number;
  /** Never answered (the connection stays open until the caller gives up). */
  hold?: boolean;
  body?: string;
};

/**
 * A real HTTP receiver on 127.0.0.1 (or the address given) that records every request and every
 * connection made to it, answering as `behaviour` says.
 */
export class Receiver {
  readonly received: Received[] = [];
  connections = 0;
  behaviour: ReceiverBehaviour = () => ({ status: 204 });
  private readonly server: http.Server;
  private readonly attempts = new Map<string, number>();

  private constructor(readonly host: string) {
    this.server = http.createServer((request, response) => {
      const chunks: Buffer[] = [];
      request.on('data', (chunk: Buffer) => chunks.push(chunk));
      request.on('end', () => {
        const headers: Record<string, string> = {};
        for (const [name, value] of Object.entries(request.headers)) {
          if (typeof value === 'string') headers[name] = value;
        }
        const received: Received = {
          path: request.url ?? '',
          id: headers['webhook-id'] ?? '',
          headers,
          body: Buffer.concat(chunks).toString('utf8'),
          at: Date.now(),
        };
        this.received.push(received);
        // Attempts are counted per endpoint (path) and event.
        const key = `${received.path} ${received.id}`;
        const attempt = (this.attempts.get(key) ?? 0) + 1;
        this.attempts.set(key, attempt);
        const answer = this.behaviour(received, attempt);
        if (answer.hold) return;
        const send = () => {
          response.writeHead(answer.status ?? 204, answer.headers ?? {});
          response.end(answer.body);
        };
        if (answer.delayMs) setTimeout(send, answer.delayMs);
        else send();
      });
    });
    this.server.on('connection', () => {
      this.connections++;
    });
  }

  static async start(host = '127.0.0.1', port = 0): Promise<Receiver> {
    const receiver = new Receiver(host);
    await new Promise<void>((resolve, reject) => {
      receiver.server.once('error', reject);
      receiver.server.listen(port, host, () => resolve());
    });
    return receiver;
  }

  get port(): number {
    return (this.server.address() as AddressInfo).port;
  }

  /** The URL of `path` on this receiver. */
  url(path = '/hooks'): string {
    const host = this.host.includes(':') ? `[${this.host}]` : this.host;
    return `http://${host}:${this.port}${path}`;
  }

  /** Those sent to `path`. */
  at(path: string): Received[] {
    return this.received.filter((request) => request.path === path);
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

export interface LogLine {
  readonly level: number;
  readonly msg: string;
  readonly [field: string]: unknown;
}

/** A service instance as `playbook serve` composes it, delivering webhooks, with its log lines kept. */
export interface WebhookInstance {
  readonly services: Services;
  readonly app: FastifyInstance;
  readonly logs: LogLine[];
  /** Every line as written, at trace level. */
  readonly rawLogs: string[];
  close(): Promise<void>;
}

export interface WebhookInstanceSetup {
  readonly env?: Record<string, string>;
  /** Whether the dispatcher starts (true by default). */
  readonly deliver?: boolean;
  readonly resolve?: typeof dns.lookup;
  readonly beforeCommit?: ServicesOptions['beforeCommit'];
  /** The metrics and tracing to record into (a test of spans). */
  readonly observation?: ServicesOptions['observation'];
}

/** Webhook settings for tests: http to the receiver on 127.0.0.1, short retries. */
export const TEST_WEBHOOK_ENV = {
  PLAYBOOK_WEBHOOK_ALLOW_HTTP: 'true',
  PLAYBOOK_WEBHOOK_ALLOW_PRIVATE: 'true',
  PLAYBOOK_WEBHOOK_RETRY_SCHEDULE: '100ms,200ms,300ms',
  PLAYBOOK_WEBHOOK_TIMEOUT_MS: '1000',
  PLAYBOOK_RATE_LIMIT_MAX: '100000',
  PLAYBOOK_AUTH_FAILURE_MAX: '100000',
};

export async function startWebhookInstance(
  backend: TestBackend,
  setup: WebhookInstanceSetup = {},
): Promise<WebhookInstance> {
  const config = loadConfig({ ...backend.env, ...TEST_WEBHOOK_ENV, ...setup.env });
  const logs: LogLine[] = [];
  const rawLogs: string[] = [];
  const logger = pino(
    { level: 'trace' },
    {
      write: (line: string) => {
        rawLogs.push(line);
        logs.push(JSON.parse(line) as LogLine);
      },
    },
  );
  const services = createServices(config, logger, {
    webhookPollMs: 50,
    changePollMs: 100,
    ...(setup.resolve ? { resolveWebhookHosts: setup.resolve } : {}),
    ...(setup.beforeCommit ? { beforeCommit: setup.beforeCommit } : {}),
    ...(setup.observation ? { observation: setup.observation } : {}),
  });
  await services.follower.start();
  const app = await buildApp({
    reads: services.reads,
    authenticator: services.authenticator,
    rateLimits: services.rateLimits,
    readiness: services.readiness,
    keys: services.identity.keys,
    audit: services.audit,
    webhooks: services.webhooks,
    publish: {
      service: services.publish,
      maxBodyBytes: config.maxPublishBytes,
      maxResources: config.maxPublishResources,
    },
    logger,
  });
  await app.ready();
  if (setup.deliver !== false) services.webhookDispatcher.start();
  return {
    services,
    app,
    logs,
    rawLogs,
    close: async () => {
      await app.close();
      await services.close();
    },
  };
}

/** `Authorization` headers of a user of `accounts`, signed by the instance's embedded signer. */
export async function userHeaders(
  instance: WebhookInstance,
  accounts: string[],
  user = 'ada',
): Promise<Record<string, string>> {
  const signer = instance.services.identity.signer;
  if (!signer) throw new Error('the test instances use the embedded signer');
  return { authorization: `Bearer ${await signer.mint({ subject: user, accounts, ttlSeconds: 3600 })}` };
}

/** One attempt as `GET …/deliveries` lists it. */
export interface ListedAttempt {
  readonly id: string;
  readonly deliveryId: string;
  readonly eventId: string;
  readonly type: string;
  readonly attempt: number;
  readonly at: string;
  readonly outcome: string;
  readonly statusCode?: number;
  readonly durationMs: number;
  readonly error?: string;
  readonly reason?: string;
  readonly nextAttemptAt?: string;
}

const ENDPOINTS = '/v3/identity/webhook-endpoints';

/**
 * An account on an instance with what webhook tests do as it: its user manages endpoints, its API key
 * publishes Catalogs (whose changes are the account's).
 */
export class WebhookAccount {
  private constructor(
    readonly instance: WebhookInstance,
    readonly id: string,
    readonly user: Record<string, string>,
    private readonly writer: Record<string, string>,
  ) {}

  static async of(instance: WebhookInstance, accountId: string, user = 'ada'): Promise<WebhookAccount> {
    const key = await instance.services.identity.keys.createFor(
      { subject: user, accounts: [accountId] },
      { name: 'ci', accountId, scopes: ['playbook:read', 'playbook:write'] },
    );
    return new WebhookAccount(instance, accountId, await userHeaders(instance, [accountId], user), {
      'x-api-key': key.key,
    });
  }

  async endpoint(url: string, events = ['*']): Promise<{ id: string; secret: string }> {
    const created = await this.instance.app.inject({
      method: 'POST',
      url: ENDPOINTS,
      headers: this.user,
      payload: { accountId: this.id, url, events },
    });
    if (created.statusCode !== 201) throw new Error(`endpoint not created: ${created.body}`);
    return created.json();
  }

  async remove(endpointId: string): Promise<void> {
    const deleted = await this.instance.app.inject({
      method: 'DELETE',
      url: `${ENDPOINTS}/${endpointId}`,
      headers: this.user,
    });
    if (deleted.statusCode !== 204) throw new Error(`endpoint not deleted: ${deleted.body}`);
  }

  /** A Catalog of `count` Resources: catalog.created, and one resource.created change each. */
  async publish(slug: string, count = 1): Promise<void> {
    const answer = await this.instance.app.inject({
      method: 'PUT',
      url: `/v3/playbook/catalogs/org/${slug}`,
      headers: this.writer,
      payload: {
        name: slug,
        version: '1',
        resources: Array.from({ length: count }, (_, i) => publishedResource(`${slug}-${i}`)),
      },
    });
    if (answer.statusCode !== 201) throw new Error(`not published: ${answer.body}`);
  }

  /** Sends a test event; answers with the delivery made. */
  async test(endpointId: string): Promise<{ id: string; eventId: string }> {
    const answer = await this.instance.app.inject({
      method: 'POST',
      url: `${ENDPOINTS}/${endpointId}/test`,
      headers: this.user,
    });
    if (answer.statusCode !== 202) throw new Error(`no test sent: ${answer.body}`);
    return answer.json();
  }

  /** The first 100 attempts listed for an endpoint, newest first. */
  async attempts(endpointId: string): Promise<ListedAttempt[]> {
    const answer = await this.instance.app.inject({
      url: `${ENDPOINTS}/${endpointId}/deliveries?pageSize=100`,
      headers: this.user,
    });
    if (answer.statusCode !== 200) throw new Error(`no attempts listed: ${answer.body}`);
    return answer.json().data;
  }
}

/** The most intervals `[start, end)` that overlap at one moment. */
export function mostAtOnce(intervals: readonly (readonly [number, number])[]): number {
  const edges = intervals.flatMap(([start, end]) => [
    [start, 1],
    [end, -1],
  ]);
  // An end and a start at the same moment do not overlap.
  edges.sort((a, b) => a[0]! - b[0]! || a[1]! - b[1]!);
  let open = 0;
  let most = 0;
  for (const [, step] of edges) {
    open += step!;
    most = Math.max(most, open);
  }
  return most;
}

/** When each attempt listed ran, as `[start, end)` in ms. */
export const spans = (made: readonly Pick<ListedAttempt, 'at' | 'durationMs'>[]) =>
  made.map((a) => [Date.parse(a.at), Date.parse(a.at) + a.durationMs] as const);
