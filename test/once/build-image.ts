import { spawn } from 'node:child_process';
import path from 'node:path';
import type {} from 'vitest';
import type { TestProject } from 'vitest/node';
import { IMAGE_TAG, missingImageTools } from '../helpers/podman.js';

/**
 * The `once` project's second globalSetup: builds the container image with `npm run image`, twice, so
 * that the tests find it built and can tell whether the second build, with nothing changed, reused every
 * layer. A missing podman fails the run; it never skips.
 */

export interface ImageBuild {
  readonly seconds: number;
  /** What the build printed, standard output and error as they came. */
  readonly output: string;
}

export interface ImageBuilds {
  readonly tag: string;
  readonly first: ImageBuild;
  readonly again: ImageBuild;
}

declare module 'vitest' {
  export interface ProvidedContext {
    /** Set by the `once` project's globalSetup. */
    playbookImage: ImageBuilds;
  }
}

const ROOT = path.resolve(import.meta.dirname, '../..');
/** A bound on a build that hangs: one that makes the bases too, on a busy machine, takes 15 minutes. */
const BUILD_TIMEOUT_MS = 40 * 60_000;

function build(): Promise<ImageBuild> {
  const started = Date.now();
  return new Promise((resolve, reject) => {
    const child = spawn('npm', ['run', '--silent', 'image'], {
      cwd: ROOT,
      env: { ...process.env, PLAYBOOK_IMAGE_TAG: IMAGE_TAG },
      stdio: ['ignore', 'pipe', 'pipe'],
      // A group of its own, so that a build past its bound is ended whole: npm, the script, podman.
      detached: true,
    });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => {
      output += chunk.toString('utf8');
    });
    child.stderr.on('data', (chunk: Buffer) => {
      output += chunk.toString('utf8');
    });
    const timer = setTimeout(() => process.kill(-child.pid!, 'SIGKILL'), BUILD_TIMEOUT_MS);
    child.once('error', reject);
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      if (code === 0) resolve({ seconds: (Date.now() - started) / 1000, output });
      else
        reject(
          new Error(`npm run image ended with ${code ?? signal}; its last lines:\n${output.slice(-6000)}`),
        );
    });
  });
}

export default async function setup(project: TestProject): Promise<void> {
  const missing = missingImageTools();
  if (missing.length > 0) {
    const ci = process.env.CI === 'true' ? ' (CI)' : '';
    throw new Error(
      [
        `The once test project${ci} builds and runs the container image, and cannot:`,
        ...missing.map((line) => `  - ${line}`),
        'On Debian, .ci/run installs them. To run the other projects meanwhile: npx vitest run --project embedded --project production',
      ].join('\n'),
    );
  }
  const first = await build();
  const again = await build();
  // Measured on every run, and printed where CI's log shows it.
  const size = /image \S+: (\d+) MB uncompressed/.exec(again.output)?.[1] ?? '?';
  process.stdout.write(
    `container image ${IMAGE_TAG}: ${size} MB; built in ${first.seconds.toFixed(0)} s, again with nothing changed in ${again.seconds.toFixed(0)} s\n`,
  );
  project.provide('playbookImage', { tag: IMAGE_TAG, first, again });
}
