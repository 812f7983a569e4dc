import { type ChildProcess, spawn } from 'node:child_process';
import path from 'node:path';
import { sleep } from './wait.js';

/** The checkout whose `npm start` is run. */
export const ROOT = path.resolve(import.meta.dirname, '../..');

export interface Started {
  readonly child: ChildProcess;
  readonly address: string;
  readonly stdout: () => string;
  readonly stderr: () => string;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** The messages of the JSON log lines written so far, in order. */
  readonly messages: () => string[];
}

export interface NpmStartOptions {
  /**
   * In a process group of its own, of which npm is the leader, as a terminal runs a foreground job:
   * a Ctrl-C there is a SIGINT to every process of the group (`process.kill(-child.pid, 'SIGINT')`).
   */
  readonly ownGroup?: boolean;
  /**
   * Skips `prestart` (the build) with `npm start --ignore-scripts`: the same processes serve, in the
   * same tree (npm, then the start script), without a build before each start.
   */
  readonly skipBuild?: boolean;
}

/** Runs `npm start` as the README says (it builds first), until it prints where it serves. */
export async function npmStart(
  dataDir: string,
  env: Record<string, string> = {},
  options: NpmStartOptions = {},
): Promise<Started> {
  const child = spawn('npm', ['start', ...(options.skipBuild ? ['--ignore-scripts'] : [])], {
    cwd: ROOT,
    env: {
      ...process.env,
      PLAYBOOK_DATA_DIR: dataDir,
      PORT: '0',
      HOST: '127.0.0.1',
      LOG_LEVEL: 'info',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: options.ownGroup === true,
  });
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (chunk: Buffer) => {
    stdout += chunk.toString('utf8');
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  const address = await new Promise<string>((resolve, reject) => {
    child.stderr!.on('data', (chunk: Buffer) => {
      stderr += chunk.toString('utf8');
      const match = /is serving on (http:\/\/[\d.:]+)/.exec(stderr);
      // The metrics line, when metrics are on, comes right after the banner.
      if (match && (env.PLAYBOOK_METRICS_PORT === undefined || /Metrics for Prometheus/.test(stderr))) {
        resolve(match[1]!);
      }
    });
    void exited.then(() => reject(new Error(`npm start exited early:\n${stderr}`)));
  });
  const messages = () =>
    stdout
      .split('\n')
      .filter((line) => line.startsWith('{'))
      .map((line) => (JSON.parse(line) as { msg: string }).msg);
  return { child, address, stdout: () => stdout, stderr: () => stderr, exited, messages };
}

/**
 * The statuses of `GET /healthz`, each on a new connection, asked every 50 ms until `deadline` (a
 * `Date.now()` time): whether a stopping server still takes and answers new connections.
 */
export async function healthzUntil(address: string, deadline: number): Promise<number[]> {
  const served: number[] = [];
  while (Date.now() < deadline) {
    served.push((await fetch(`${address}/healthz`, { headers: { connection: 'close' } })).status);
    await sleep(50);
  }
  return served;
}
