import { execFile, execFileSync } from 'node:child_process';
import { promisify } from 'node:util';

/**
 * Containers for the tests of the container image (test/once/): podman, run as deploy/image/build.sh
 * runs it — runc and the cgroupfs manager (crun refuses hybrid cgroup hierarchies), and open-file and
 * process limits under the machine's hard limits (podman's defaults exceed some).
 */

const run = promisify(execFile);

export const PODMAN = ['podman', '--runtime', 'runc', '--cgroup-manager=cgroupfs'] as const;
const LIMITS = ['--ulimit', 'nofile=1024:1024', '--ulimit', 'nproc=1024:1024'];

/** The image the `once` project builds, and that its tests run. */
export const IMAGE_TAG = 'localhost/playbook:suite';

/** Lines naming what the image's tests need and cannot find, with what installs it; empty when all is. */
export function missingImageTools(): string[] {
  const missing: string[] = [];
  for (const [program, pkg] of [
    ['podman', 'podman'],
    ['runc', 'runc'],
    ['mmdebstrap', 'mmdebstrap'],
  ] as const) {
    try {
      execFileSync('sh', ['-c', `command -v ${program}`], { stdio: 'ignore' });
    } catch {
      missing.push(`${program} is not on PATH (apt-get install -y ${pkg}; .ci/run installs it)`);
    }
  }
  return missing;
}

export interface Ran {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** `podman …args`, its exit code and output, whatever the code. */
export async function podman(args: readonly string[], timeoutMs = 120_000): Promise<Ran> {
  try {
    const { stdout, stderr } = await run(PODMAN[0], [...PODMAN.slice(1), ...args], {
      maxBuffer: 64 * 1024 * 1024,
      timeout: timeoutMs,
    });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const failed = error as { code?: unknown; stdout?: string; stderr?: string };
    if (typeof failed.code !== 'number') throw error;
    return { code: failed.code, stdout: failed.stdout ?? '', stderr: failed.stderr ?? '' };
  }
}

/** `podman …args`, failing with its output unless it exits 0. */
export async function podmanOk(args: readonly string[], timeoutMs?: number): Promise<string> {
  const ran = await podman(args, timeoutMs);
  if (ran.code !== 0) {
    throw new Error(`podman ${args.join(' ')} exited ${ran.code}:\n${ran.stdout}\n${ran.stderr}`);
  }
  return ran.stdout;
}

export interface ContainerOptions {
  /** The container's name; the tests remove it at the end. */
  readonly name: string;
  /** The arguments after the image: the command of the Compose service or Kubernetes container. */
  readonly args: readonly string[];
  readonly env: Readonly<Record<string, string>>;
  /** `source:target[:options]`: a named volume or a file of the host. */
  readonly volumes?: readonly string[];
  readonly user?: string;
  /** Without it, the image's own volume (/app/data) is not made: what Kubernetes does. */
  readonly imageVolumes?: boolean;
}

/**
 * Runs the image in the background, as the deployment examples do: on a read-only root with a
 * temporary /tmp, on the host's network (the suite's servers and the test's listen on its loopback).
 */
export async function startContainer(options: ContainerOptions): Promise<string> {
  const args = [
    'run',
    '--detach',
    // The image is the one the suite built: never one from a registry.
    '--pull',
    'never',
    '--name',
    options.name,
    '--network',
    'host',
    '--read-only',
    '--tmpfs',
    '/tmp',
    ...LIMITS,
    ...(options.imageVolumes === false ? ['--image-volume', 'ignore'] : []),
    ...(options.user ? ['--user', options.user] : []),
    ...(options.volumes ?? []).flatMap((volume) => ['--volume', volume]),
    ...Object.entries(options.env).flatMap(([name, value]) => ['--env', `${name}=${value}`]),
    IMAGE_TAG,
    ...options.args,
  ];
  await podmanOk(args);
  return options.name;
}

/** Runs the image to its end (a one-off command) and returns its exit code and output. */
export async function runToEnd(options: ContainerOptions): Promise<Ran> {
  await startContainer(options);
  const exited = Number((await podmanOk(['wait', options.name])).trim());
  const logs = await containerLogs(options.name);
  return { code: exited, ...logs };
}

export async function containerLogs(name: string): Promise<{ stdout: string; stderr: string }> {
  const { stdout, stderr } = await podman(['logs', name]);
  return { stdout, stderr };
}

/** The `msg` of each JSON log line the container wrote to its standard output. */
export async function logMessages(name: string): Promise<string[]> {
  const { stdout } = await containerLogs(name);
  return stdout
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => (JSON.parse(line) as { msg?: string }).msg ?? '');
}

/** Removes the containers and volumes named, whatever state they are in. */
export async function removeAll(
  containers: readonly string[],
  volumes: readonly string[] = [],
): Promise<void> {
  if (containers.length > 0) await podman(['rm', '--force', '--time', '0', ...containers]);
  if (volumes.length > 0) await podman(['volume', 'rm', '--force', ...volumes]);
}
