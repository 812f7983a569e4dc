import net from 'node:net';
import { performance } from 'node:perf_hooks';
import type { FastifyInstance } from 'fastify';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { ReadAnswers } from '../../src/answers/read-answers.js';
import type { Authenticator } from '../../src/auth/authenticator.js';
import { buildApp } from '../../src/composition/app.js';
import { AuthenticationError } from '../../src/foundation/errors.js';
import { unlimited } from '../helpers/app.js';
import { sleep } from '../helpers/wait.js';

const REQUEST_MS = 400;
const KEEP_ALIVE_MS = 1500;
/** Node's check runs every `min(1000, REQUEST_MS)`; this is the slack on top of both, for a busy machine. */
const SLACK_MS = 1500;

const refuseAll: Authenticator = {
  authenticate: async () => {
    throw new AuthenticationError('no credential', 'missing');
  },
};

/**
 * A client socket that records what it receives. `allowHalfOpen` keeps its own side open after the
 * server's FIN, as a client that never closes does: only the server can then free the connection.
 */
interface Client {
  readonly socket: net.Socket;
  /** Everything received so far. */
  text(): string;
  /** Resolves with the time since `since` when the server's side ends (its FIN), or null at `timeoutMs`. */
  ended(since: number, timeoutMs: number): Promise<number | null>;
}

/** Every client socket, destroyed after each test whatever its outcome. */
const opened: net.Socket[] = [];

async function connect(port: number, allowHalfOpen: boolean): Promise<Client> {
  const socket = net.connect({ port, host: '127.0.0.1', allowHalfOpen });
  opened.push(socket);
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('error', reject);
  });
  socket.on('error', () => {});
  const chunks: Buffer[] = [];
  socket.on('data', (chunk: Buffer) => chunks.push(chunk));
  let endedAt: number | undefined;
  const ending = new Promise<void>((resolve) => {
    const done = () => {
      endedAt ??= performance.now();
      resolve();
    };
    socket.once('end', done);
    socket.once('close', done);
  });
  return {
    socket,
    text: () => Buffer.concat(chunks).toString('utf8'),
    ended: async (since, timeoutMs) => {
      await Promise.race([ending, sleep(timeoutMs)]);
      return endedAt === undefined ? null : endedAt - since;
    },
  };
}

describe('D20: connections that send too little are closed, and only those', () => {
  let app: FastifyInstance;
  let port: number;

  /** Sockets the server holds open: each is a file descriptor. */
  const held = () =>
    new Promise<number>((resolve, reject) =>
      app.server.getConnections((error, count) => (error ? reject(error) : resolve(count))),
    );
  /** Waits until the server holds no socket; the time it took, or null past `timeoutMs`. */
  const allReleased = async (since: number, timeoutMs: number): Promise<number | null> => {
    while (performance.now() - since < timeoutMs) {
      if ((await held()) === 0) return performance.now() - since;
      await sleep(20);
    }
    return null;
  };

  beforeAll(async () => {
    // Only /healthz is asked: the read service is never reached.
    app = await buildApp({
      reads: {} as ReadAnswers,
      authenticator: refuseAll,
      rateLimits: unlimited,
      readiness: [],
      timeouts: { requestMs: REQUEST_MS, keepAliveMs: KEEP_ALIVE_MS },
    });
    await app.listen({ port: 0, host: '127.0.0.1' });
    port = (app.server.address() as net.AddressInfo).port;
  });
  afterEach(() => {
    for (const socket of opened.splice(0)) socket.destroy();
  });
  afterAll(async () => {
    await app?.close();
  });

  it('closes a connection that never sends a byte after the request timeout, unanswered', async () => {
    const client = await connect(port, false);
    const started = performance.now();
    const after = await client.ended(started, REQUEST_MS + SLACK_MS + 1000);
    expect(after).not.toBeNull();
    expect(after).toBeGreaterThanOrEqual(REQUEST_MS - 50);
    expect(after).toBeLessThan(REQUEST_MS + SLACK_MS);
    // Nothing was asked: no 408 that a client could take for the answer to a request it sends late.
    expect(client.text()).toBe('');
  });

  it('frees the socket of a silent client that never closes its own side', async () => {
    const client = await connect(port, true);
    const started = performance.now();
    expect(await allReleased(started, REQUEST_MS + SLACK_MS)).not.toBeNull();
    expect(await client.ended(started, SLACK_MS)).not.toBeNull();
    expect(client.text()).toBe('');
  });

  it('frees all of 200 silent connections', async () => {
    const clients = await Promise.all(Array.from({ length: 200 }, (_, i) => connect(port, i % 2 === 0)));
    const started = performance.now();
    // The clients' connects complete in the kernel; the server accepts them a moment later.
    let accepted = await held();
    while (accepted < 200 && performance.now() - started < REQUEST_MS / 2) {
      await sleep(5);
      accepted = await held();
    }
    expect(accepted).toBe(200);
    expect(await allReleased(started, REQUEST_MS + SLACK_MS + 1000)).not.toBeNull();
    const ended = await Promise.all(clients.map((client) => client.ended(started, SLACK_MS)));
    expect(ended.filter((after) => after === null)).toHaveLength(0);
    expect(clients.filter((client) => client.text() !== '')).toHaveLength(0);
  });

  it('answers a request that arrives within the timeout on a connection opened earlier', async () => {
    const client = await connect(port, false);
    await new Promise((resolve) => setTimeout(resolve, REQUEST_MS / 2));
    client.socket.write('GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
    expect(await client.ended(performance.now(), REQUEST_MS + SLACK_MS)).not.toBeNull();
    expect(client.text()).toMatch(/^HTTP\/1\.1 200 /);
  });

  it('keeps a keep-alive connection open between requests until the keep-alive timeout', async () => {
    const client = await connect(port, false);
    const ask = async (id: string) => {
      const before = client.text().length;
      client.socket.write(`GET /healthz HTTP/1.1\r\nHost: x\r\nx-request-id: ${id}\r\n\r\n`);
      while (!client.text().slice(before).includes(`x-request-id: ${id}`)) {
        await sleep(10);
      }
    };
    await ask('first');
    // Idle for longer than the request timeout (and Node's check), but within the keep-alive timeout.
    await new Promise((resolve) => setTimeout(resolve, REQUEST_MS * 2 + 100));
    await ask('second');
    const answered = performance.now();
    // Node closes a second after the timeout it advertises in `Keep-Alive`, for clients that round.
    const after = await client.ended(answered, KEEP_ALIVE_MS + 1000 + SLACK_MS);
    expect(after).not.toBeNull();
    expect(after).toBeGreaterThanOrEqual(KEEP_ALIVE_MS - 100);
    expect(client.text().match(/HTTP\/1\.1 200 /g)).toHaveLength(2);
  });

  it('answers a request whose headers stall 408, and frees its socket even if the client never closes', async () => {
    const client = await connect(port, true);
    client.socket.write('GET /healthz HTTP/1.1\r\nHost: x\r\n');
    const started = performance.now();
    expect(await client.ended(started, REQUEST_MS + SLACK_MS)).not.toBeNull();
    expect(client.text()).toMatch(/^HTTP\/1\.1 408 /);
    expect(client.text()).toContain('"code":"request_timeout"');
    // The answer ends the service's side only; the socket itself goes after a bounded wait.
    expect(await allReleased(started, 2 * REQUEST_MS + SLACK_MS)).not.toBeNull();
  });

  it('frees the socket of a refused CONNECT even if the client never closes', async () => {
    const client = await connect(port, true);
    client.socket.write('CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n');
    const started = performance.now();
    expect(await client.ended(started, SLACK_MS)).not.toBeNull();
    expect(client.text()).toMatch(/^HTTP\/1\.1 501 /);
    expect(await allReleased(started, REQUEST_MS + SLACK_MS)).not.toBeNull();
  });
});
