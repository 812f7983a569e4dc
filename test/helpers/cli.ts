import { type ChildProcess, spawn } from 'node:child_process';
import path from 'node:path';
import { Writable } from 'node:stream';
import { main } from '../../src/cli/program.js';

/** The built command line, as `npx playbook` runs it. */
export const CLI_MAIN = path.resolve(import.meta.dirname, '../../dist/cli/main.js');

/** A stream that keeps what is written to it. */
export class Capture extends Writable {
  text = '';
  override _write(chunk: Buffer, _encoding: string, done: () => void): void {
    this.text += chunk.toString('utf8');
    done();
  }
}

export interface CliResult {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/**
 * Runs `playbook …args` in this process with `env` as its whole environment, and returns its exit
 * code and what it wrote.
 *
 * @example
 * const { code, stdout } = await runCli(['keys', 'list', '--account', 'acme'], backend.env);
 */
export async function runCli(args: readonly string[], env: Record<string, string>): Promise<CliResult> {
  const stdout = new Capture();
  const stderr = new Capture();
  const code = await main(['node', 'playbook', ...args], env, { stdout, stderr });
  return { code, stdout: stdout.text, stderr: stderr.text };
}

/** A command line running as a process of its own, and what it has written so far. */
export interface CliProcess {
  readonly child: ChildProcess;
  stdout(): string;
  stderr(): string;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Resolves once stdout holds text that `test` accepts; rejects if the process ends first or in `ms`. */
  waitFor(test: (stdout: string) => boolean, ms?: number): Promise<string>;
  /** The same for stderr, where `serve` says where it serves. */
  waitForStderr(test: (stderr: string) => boolean, ms?: number): Promise<string>;
}

/** Starts `node dist/cli/main.js …args` (build first: `npm run build`) with `env` over this process's. */
export function spawnCli(args: readonly string[], env: Record<string, string>): CliProcess {
  const child = spawn(process.execPath, [CLI_MAIN, ...args], {
    env: { ...process.env, LOG_LEVEL: 'warn', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  const waiters = new Set<() => void>();
  child.stdout!.on('data', (chunk: Buffer) => {
    out += chunk.toString('utf8');
    for (const wake of waiters) wake();
  });
  child.stderr!.on('data', (chunk: Buffer) => {
    err += chunk.toString('utf8');
    for (const wake of waiters) wake();
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => {
      resolve({ code, signal });
      for (const wake of waiters) wake();
    }),
  );
  let ended = false;
  void exited.then(() => {
    ended = true;
  });
  const waitOn =
    (read: () => string) =>
    (test: (text: string) => boolean, ms = 10_000): Promise<string> =>
      new Promise<string>((resolve, reject) => {
        const timer = setTimeout(() => {
          waiters.delete(check);
          reject(new Error(`not seen within ${ms} ms; stdout:\n${out}\nstderr:\n${err}`));
        }, ms);
        const check = () => {
          if (test(read())) {
            clearTimeout(timer);
            waiters.delete(check);
            resolve(read());
          } else if (ended) {
            clearTimeout(timer);
            waiters.delete(check);
            reject(new Error(`the command ended first; stdout:\n${out}\nstderr:\n${err}`));
          }
        };
        waiters.add(check);
        check();
      });
  return {
    child,
    stdout: () => out,
    stderr: () => err,
    exited,
    waitFor: waitOn(() => out),
    waitForStderr: waitOn(() => err),
  };
}
