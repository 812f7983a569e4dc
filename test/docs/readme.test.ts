import { type ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const ROOT = path.resolve(import.meta.dirname, '../..');

/** Where the README says the service is: the test's own server stands in for it. */
const README_ADDRESS = 'http://127.0.0.1:8080';
/** Written on the line before a shell block that the test does not run, with the reason. */
const SKIP = /^<!-- readme-test: skip \(.+\) -->$/;

interface ShellStep {
  readonly command: string;
  /** What the README shows it prints, `…` standing for any text; undefined when it shows nothing. */
  readonly output?: string;
  readonly line: number;
}

interface Fence {
  readonly lang: string;
  readonly body: string;
  readonly line: number;
  readonly skipped: boolean;
}

/** The README's fenced blocks, in order; a fence is skipped when the line before it says so. */
function fences(markdown: string): { fences: Fence[]; follows: Map<Fence, Fence> } {
  const lines = markdown.split('\n');
  const found: Fence[] = [];
  const follows = new Map<Fence, Fence>();
  let previous: Fence | undefined;
  let textSincePrevious = false;
  for (let i = 0; i < lines.length; i++) {
    const open = /^```(\S*)$/.exec(lines[i]!);
    if (!open) {
      if (lines[i]!.trim() !== '') textSincePrevious = true;
      continue;
    }
    const start = i;
    const body: string[] = [];
    for (i++; i < lines.length && lines[i] !== '```'; i++) body.push(lines[i]!);
    const fence: Fence = {
      lang: open[1]!,
      body: body.join('\n'),
      line: start + 1,
      skipped: SKIP.test(lines[start - 1] ?? ''),
    };
    if (previous && !textSincePrevious) follows.set(previous, fence);
    found.push(fence);
    previous = fence;
    textSincePrevious = false;
  }
  return { fences: found, follows };
}

/** The shell blocks the test runs, each with the output the README shows right after it. */
function shellSteps(markdown: string): { steps: ShellStep[]; skipped: string[] } {
  const parsed = fences(markdown);
  const steps: ShellStep[] = [];
  const skipped: string[] = [];
  for (const fence of parsed.fences) {
    if (fence.lang !== 'sh') continue;
    if (fence.skipped) {
      skipped.push(fence.body);
      continue;
    }
    const next = parsed.follows.get(fence);
    const output = next && (next.lang === 'text' || next.lang === 'json') ? next.body : undefined;
    steps.push({ command: fence.body, line: fence.line, ...(output === undefined ? {} : { output }) });
  }
  return { steps, skipped };
}

/** Output as the README shows it: `…` stands for any text, everything else is literal. */
function shownAs(expected: string): RegExp {
  const parts = expected
    .trim()
    .split('…')
    .map((part) => part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'));
  return new RegExp(`^${parts.join('[\\s\\S]*?')}$`);
}

/** `npm start`'s own command: node with the flags of the start script, on the built service. */
async function startScript(): Promise<string[]> {
  const manifest = JSON.parse(await fs.readFile(path.join(ROOT, 'package.json'), 'utf8'));
  const words = String(manifest.scripts.start).split(/\s+/);
  expect(words.slice(0, 2)).toEqual(['exec', 'node']);
  return words.slice(2);
}

interface Server {
  readonly child: ChildProcess;
  readonly address: string;
  readonly exited: Promise<number | null>;
}

async function serve(dataDir: string): Promise<Server> {
  const args = await startScript();
  const child = spawn(process.execPath, args, {
    cwd: ROOT,
    env: { ...withoutPlaybookVariables(), PLAYBOOK_DATA_DIR: dataDir, PORT: '0', HOST: '127.0.0.1' },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  let stderr = '';
  const address = await new Promise<string>((resolve, reject) => {
    child.stderr!.on('data', (chunk: Buffer) => {
      stderr += chunk.toString('utf8');
      const match = /is serving on (http:\/\/[\d.:]+)/.exec(stderr);
      if (match) resolve(match[1]!);
    });
    void exited.then(() => reject(new Error(`the service exited early:\n${stderr}`)));
  });
  return { child, address, exited };
}

/** The environment of a new terminal: nothing of the developer's own Playbook settings. */
function withoutPlaybookVariables(): NodeJS.ProcessEnv {
  return Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith('PLAYBOOK_')));
}

const MARK = '@@readme-step-done@@';

/**
 * Runs the steps in order in one shell, as a reader pastes them into one terminal, stopping at the
 * first command that fails; returns what each step printed and the shell's exit status.
 */
async function runInOneShell(
  steps: readonly ShellStep[],
  cwd: string,
  env: NodeJS.ProcessEnv,
): Promise<{ outputs: string[]; stderr: string; code: number | null }> {
  const script = [
    'set -euo pipefail',
    ...steps.flatMap((step) => [step.command, `printf '%s\\n' '${MARK}'; printf '%s\\n' '${MARK}' >&2`]),
  ].join('\n');
  const child = spawn('bash', ['-c', script], { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => {
    stdout += chunk.toString('utf8');
  });
  child.stderr.on('data', (chunk: Buffer) => {
    stderr += chunk.toString('utf8');
  });
  const code = await new Promise<number | null>((resolve) => child.once('close', resolve));
  return { outputs: stdout.split(`${MARK}\n`), stderr, code };
}

describe('README quick start, run as written', () => {
  let work: string;
  let dataDir: string;
  let server: Server;
  let result: Awaited<ReturnType<typeof runInOneShell>>;
  let steps: ShellStep[];
  let skipped: string[];

  beforeAll(async () => {
    const readme = await fs.readFile(path.join(ROOT, 'README.md'), 'utf8');
    ({ steps, skipped } = shellSteps(readme));
    work = await fs.mkdtemp(path.join(os.tmpdir(), 'playbook-readme-'));
    dataDir = path.join(work, 'data');
    server = await serve(dataDir);
    // A folder of its own stands for the clone: the commands' files (the `playbook` program, the
    // examples) are this checkout's, and what the commands write stays in the folder.
    const checkout = path.join(work, 'checkout');
    await fs.mkdir(path.join(checkout, 'node_modules', '.bin'), { recursive: true });
    await fs.symlink(
      path.join(ROOT, 'bin', 'playbook.js'),
      path.join(checkout, 'node_modules', '.bin', 'playbook'),
    );
    await fs.symlink(path.join(ROOT, 'examples'), path.join(checkout, 'examples'));
    const commands = steps.map((step) => ({
      ...step,
      command: step.command.replaceAll(README_ADDRESS, server.address),
    }));
    result = await runInOneShell(commands, checkout, {
      ...withoutPlaybookVariables(),
      // `playbook token` signs with the key the server made in its data directory.
      PLAYBOOK_DATA_DIR: dataDir,
    });
  }, 180_000);

  afterAll(async () => {
    if (server && server.child.exitCode === null) {
      server.child.kill('SIGTERM');
      await server.exited;
    }
    if (work) await fs.rm(work, { recursive: true, force: true });
  });

  it('keeps the two promised commands verbatim, and skips nothing else', async () => {
    const readme = await fs.readFile(path.join(ROOT, 'README.md'), 'utf8');
    expect(readme).toContain('npm ci && npm start');
    expect(readme).toContain('npm ci && npm test');
    expect(skipped).toEqual(['npm ci && npm start', 'npm ci && npm test']);
    // The steps take a reader from a key to a read, a publish and a mirror.
    expect(steps.length).toBeGreaterThanOrEqual(6);
    expect(steps[0]!.command).toMatch(/^export PLAYBOOK_API_KEY=\$\(npx playbook keys create /);
    expect(steps[0]!.command).toContain(`export PLAYBOOK_URL=${README_ADDRESS}`);
    expect(steps.some((step) => step.command.includes('npx playbook publish'))).toBe(true);
    expect(steps.some((step) => step.command.includes('node examples/mirror-catalogs.mjs'))).toBe(true);
  });

  it('runs every command of the quick start, in order, without a failure', () => {
    const done = result.outputs.length - 1;
    const failed = steps[done];
    expect(
      result.code,
      failed ? `README line ${failed.line} failed:\n${failed.command}\n${result.stderr}` : result.stderr,
    ).toBe(0);
    expect(done).toBe(steps.length);
  });

  it('prints what the README shows after each command', () => {
    const shown = steps.filter((step) => step.output !== undefined);
    expect(shown.length).toBeGreaterThanOrEqual(6);
    steps.forEach((step, index) => {
      if (step.output === undefined) return;
      const printed = (result.outputs[index] ?? '').trimEnd();
      expect(printed, `README line ${step.line}: ${step.command.split('\n')[0]}`).toMatch(
        shownAs(step.output),
      );
    });
  });

  it('mirrors every Resource the free plan may read, and reports the one it may not', async () => {
    const mirror = path.join(work, 'checkout', 'quick-start', 'mirror');
    const files = (await fs.readdir(mirror, { recursive: true, withFileTypes: true }))
      .filter((entry) => entry.isFile())
      .map((entry) =>
        path.relative(mirror, path.join(entry.parentPath, entry.name)).split(path.sep).join('/'),
      )
      .sort();
    expect(files).toHaveLength(20);
    expect(files).toContain('org/runbooks/deploy.md');
    expect(files).toContain('svc/incident-response/severity-levels.json');
    // The pro-only demo Resource is skipped, and service drafts are seen by no caller.
    expect(files.filter((file) => file.startsWith('svc/integrations/sso-setup-guide'))).toEqual([]);
    expect(files.filter((file) => file.includes('dependency-upgrade-policy'))).toEqual([]);
    expect(await fs.readFile(path.join(mirror, 'org/runbooks/deploy.md'), 'utf8')).toBe(
      '# Deploy\n\n1. Merge to main.\n2. Watch the dashboards for ten minutes.\n',
    );
  });
});
