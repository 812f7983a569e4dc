import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterEach, describe, expect, it } from 'vitest';
import { runCli } from '../helpers/cli.js';
import { inFlight, slowPublish } from '../helpers/in-flight.js';
import { healthzUntil, npmStart, type Started } from '../helpers/npm-start.js';
import { sleep, waitFor } from '../helpers/wait.js';

/**
 * D29, D31: SIGINT and SIGTERM through `npm start` drain once. A terminal's Ctrl-C is a SIGINT to
 * every process of the foreground group, npm and the server alike, and npm forwards what it gets to
 * the server too: the server sees the signal at least twice, and the second must not cut the drain
 * short. Each start here runs in a process group of its own, as a terminal's job does, and skips the
 * build (`npm start --ignore-scripts`; start.test.ts covers the build): the same processes in the same
 * tree.
 */

/** Whether something listens on `port` of loopback: a connection is taken, or refused. */
async function listening(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

/** Binds `port` of loopback and lets it go: it fails while another process holds the port. */
async function bindable(port: number): Promise<boolean> {
  const server = net.createServer();
  return new Promise((resolve) => {
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

/** The processes of a group, as `ps` lists them: pid, parent, command line. */
async function groupMembers(pgid: number): Promise<{ pid: number; ppid: number; args: string }[]> {
  const { stdout } = await promisify(execFile)('ps', ['-eo', 'pid=,ppid=,pgid=,args=']);
  return (
    stdout
      .split('\n')
      .map((line) => /^\s*(\d+)\s+(\d+)\s+(\d+)\s+(.*)$/.exec(line))
      .filter((match) => match !== null && Number(match[3]) === pgid)
      .map((match) => ({ pid: Number(match![1]), ppid: Number(match![2]), args: match![4]! }))
      // The group's leader first, then the others: `ps` lists by pid, and pids wrap around, so a child
      // may have a smaller one than its parent.
      .sort((a, b) => Number(b.pid === pgid) - Number(a.pid === pgid) || a.pid - b.pid)
  );
}

describe('signals through npm start (D29, D31)', () => {
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });

  /** A data directory with an API key that may publish, and `npm start` serving it in its own group. */
  async function serving(
    env: Record<string, string> = {},
  ): Promise<{ started: Started; key: string; port: number; metrics: string }> {
    const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'playbook-signals-'));
    cleanups.push(() => fs.rm(dataDir, { recursive: true, force: true }));
    const created = await runCli(
      ['keys', 'create', '--account', 'signals', '--name', 'signals', '--scope', 'playbook:write'],
      { PLAYBOOK_DATA_DIR: dataDir, LOG_LEVEL: 'silent' },
    );
    expect(created.code).toBe(0);
    // Metrics on a port of the system's choice: what tells that a request is in flight.
    const started = await npmStart(
      dataDir,
      { PLAYBOOK_METRICS_PORT: '0', ...env },
      { ownGroup: true, skipBuild: true },
    );
    cleanups.push(async () => {
      // Whatever a failed test left of the group it started.
      if (started.child.exitCode === null && started.child.signalCode === null) {
        process.kill(-started.child.pid!, 'SIGKILL');
      }
    });
    const metrics = /Metrics for Prometheus: (\S+)/.exec(started.stderr())![1]!;
    return { started, key: created.stdout.trim(), port: Number(new URL(started.address).port), metrics };
  }

  it('npm runs the server itself: `exec` replaces the shell, so the group is npm and node alone', async () => {
    const { started } = await serving();
    const members = await groupMembers(started.child.pid!);
    expect(members.map((member) => member.args.split(' ')[0])).toEqual(['npm', 'node']);
    const server = members.find((member) => member.args.startsWith('node '))!;
    expect(server.ppid).toBe(started.child.pid);
    expect(server.args).toMatch(/dist\/cli\/main\.js serve$/);
    process.kill(-started.child.pid!, 'SIGINT');
    expect(await started.exited).toEqual({ code: 0, signal: null });
  });

  it.each([
    ['SIGINT to the group once (a Ctrl-C)', 'SIGINT', 'group', 1],
    ['SIGINT to the group twice in quick succession (Ctrl-C, Ctrl-C)', 'SIGINT', 'group', 2],
    ['SIGTERM to the group twice', 'SIGTERM', 'group', 2],
    ['SIGINT to npm alone, twice (npm forwards it)', 'SIGINT', 'npm', 2],
    ['SIGTERM to npm alone', 'SIGTERM', 'npm', 1],
  ] as const)(
    '%s: the request in flight gets its whole answer, the drain is logged once, the port is freed, exit 0',
    async (_label, signal, target, times) => {
      const { started, key, port, metrics } = await serving();
      const publication = slowPublish(started.address, key);
      await inFlight(metrics);

      const pid = target === 'group' ? -started.child.pid! : started.child.pid!;
      for (let i = 0; i < times; i++) {
        process.kill(pid, signal);
        if (i + 1 < times) await sleep(20);
      }
      // The drain has begun (and the listener is closed) while the request is still waiting for its body.
      await waitFor('the drain line', () => started.messages().includes('draining in-flight requests'), 5000);
      await waitFor('the listener closed', async () => !(await listening(port)), 5000);
      expect(started.child.exitCode).toBeNull();

      publication.finish();
      const answer = await publication.answer;
      expect(answer.status).toBe(200);
      expect(answer.headers.connection).toBe('close');
      const report = JSON.parse(answer.body) as { dryRun: boolean; changes: { created: number } };
      expect(report).toMatchObject({ dryRun: true, changes: { created: 1 } });

      expect(await started.exited).toEqual({ code: 0, signal: null });
      const messages = started.messages();
      expect(messages.filter((message) => message === 'draining in-flight requests')).toHaveLength(1);
      expect(messages.filter((message) => message === 'stopped')).toHaveLength(1);
      expect(messages.at(-1)).toBe('stopped');
      // Nothing of the server is left: its port can be bound again, and the group is empty.
      expect(await bindable(port)).toBe(true);
      expect(await groupMembers(started.child.pid!)).toEqual([]);
    },
    60_000,
  );

  it('with PLAYBOOK_SHUTDOWN_DELAY_MS, a Ctrl-C fails /readyz at once, the listener answers new connections for the delay, then the drain answers what is in flight', async () => {
    const delayMs = 1500;
    const { started, key, port, metrics } = await serving({ PLAYBOOK_SHUTDOWN_DELAY_MS: String(delayMs) });
    expect((await fetch(`${started.address}/readyz`)).status).toBe(200);
    const publication = slowPublish(started.address, key);
    await inFlight(metrics);

    process.kill(-started.child.pid!, 'SIGINT');
    const signalledAt = Date.now();
    setTimeout(() => process.kill(-started.child.pid!, 'SIGINT'), 50);
    // /readyz fails first…
    let readyz = 200;
    while (readyz === 200 && Date.now() - signalledAt < delayMs) {
      readyz = (await fetch(`${started.address}/readyz`, { headers: { connection: 'close' } })).status;
    }
    expect(readyz).toBe(503);
    // …while new connections are taken and answered for the delay.
    const served = await healthzUntil(started.address, signalledAt + delayMs - 300);
    expect(served.length).toBeGreaterThan(5);
    expect(served.every((status) => status === 200)).toBe(true);

    await waitFor('the drain line', () => started.messages().includes('draining in-flight requests'), 5000);
    expect(Date.now() - signalledAt).toBeGreaterThanOrEqual(delayMs);
    publication.finish();
    const answer = await publication.answer;
    expect(answer.status).toBe(200);
    expect(JSON.parse(answer.body)).toMatchObject({ dryRun: true });

    expect(await started.exited).toEqual({ code: 0, signal: null });
    const messages = started.messages();
    expect(messages.filter((message) => message.startsWith('stopping: /readyz fails'))).toHaveLength(1);
    expect(messages.filter((message) => message === 'draining in-flight requests')).toHaveLength(1);
    expect(messages.at(-1)).toBe('stopped');
    expect(await bindable(port)).toBe(true);
  }, 60_000);
});
