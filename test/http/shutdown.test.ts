import net from 'node:net';
import type { FastifyInstance } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import type { ReadAnswers } from '../../src/answers/read-answers.js';
import type { Authenticator } from '../../src/auth/authenticator.js';
import { buildApp } from '../../src/composition/app.js';
import { AuthenticationError } from '../../src/foundation/errors.js';
import { unlimited } from '../helpers/app.js';
import { sleep } from '../helpers/wait.js';

const refuseAll: Authenticator = {
  authenticate: async () => {
    throw new AuthenticationError('no credential', 'missing');
  },
};

/** Sends raw HTTP/1.1 on one socket and collects everything the server writes until it closes. */
function rawExchange(port: number, requests: string): { sent: Promise<void>; received: Promise<string> } {
  const socket = net.connect(port, '127.0.0.1');
  let data = '';
  socket.on('data', (chunk) => {
    data += chunk.toString('utf8');
  });
  const received = new Promise<string>((resolve, reject) => {
    socket.on('close', () => resolve(data));
    socket.on('error', reject);
  });
  const sent = new Promise<void>((resolve) => socket.write(requests, () => resolve()));
  return { sent, received };
}

describe('graceful shutdown (D14 serve, D2)', () => {
  let app: FastifyInstance | undefined;
  afterEach(async () => {
    await app?.close();
  });

  it('finishes the in-flight request with Connection: close, and closes without waiting on keep-alive', async () => {
    // The read service is never reached: the only route used here is the slow one below.
    app = await buildApp({
      reads: {} as ReadAnswers,
      authenticator: refuseAll,
      rateLimits: unlimited,
      readiness: [],
    });
    let release!: () => void;
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    let entered!: () => void;
    const inFlight = new Promise<void>((resolve) => {
      entered = resolve;
    });
    app.get('/slow', async () => {
      entered();
      await gate;
      return { done: true };
    });
    await app.listen({ port: 0, host: '127.0.0.1' });
    const { port } = app.server.address() as net.AddressInfo;

    // Two pipelined requests on one connection: the second is read only after the first answers.
    const exchange = rawExchange(
      port,
      'GET /slow HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\nx-request-id: queued-1\r\n\r\n',
    );
    await exchange.sent;
    await inFlight;
    const closing = app.close();
    // close() runs its hooks asynchronously; the in-flight request ends once draining has begun.
    await sleep(50);
    release();
    const text = await exchange.received;
    // Without Connection: close, the idle keep-alive socket would hold close() for 72 seconds.
    await closing;

    const answers = text.split(/(?=HTTP\/1\.1 )/);
    expect(answers[0]).toMatch(/^HTTP\/1\.1 200/);
    expect(answers[0]).toContain('{"done":true}');
    expect(answers[0]?.toLowerCase()).toContain('connection: close');
    // The connection closes after the in-flight answer: the request queued behind it is never read,
    // so the client sees a closed connection and retries elsewhere, and close() does not wait on it.
    expect(answers).toHaveLength(1);
    app = undefined;
  });

  it('accepts no new connection once closed', async () => {
    app = await buildApp({
      reads: {} as ReadAnswers,
      authenticator: refuseAll,
      rateLimits: unlimited,
      readiness: [],
    });
    await app.listen({ port: 0, host: '127.0.0.1' });
    const { port } = app.server.address() as net.AddressInfo;
    expect((await fetch(`http://127.0.0.1:${port}/healthz`)).status).toBe(200);
    await app.close();
    await expect(fetch(`http://127.0.0.1:${port}/healthz`)).rejects.toThrow();
    app = undefined;
  });
});
