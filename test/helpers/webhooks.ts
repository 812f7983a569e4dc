import type dns from 'node:dns';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import pino from 'pino';
import { buildApp } from '../../src/composition/app.js';
import { createServices, type Services, type ServicesOptions } from '../../src/composition/services.js';
import { loadConfig } from '../../src/foundation/config.js';
import type { TestBackend } from './backend.js';

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
