import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { type ComposeService, composeService } from '../helpers/deploy-examples.js';
import { acceptedKeys, inFlight, slowPublish } from '../helpers/in-flight.js';
import { IMAGE_TAG, logMessages, podman, podmanOk, removeAll, startContainer } from '../helpers/podman.js';
import { publishedResource } from '../helpers/publish-bodies.js';
import { freePort } from '../helpers/servers.js';
import { waitFor } from '../helpers/wait.js';

/**
 * The container image as built by `npm run image` (the `once` project's globalSetup builds it twice),
 * and run on the embedded default as deploy/compose.yaml runs it: its command, environment, volume,
 * user, read-only root and stop signal come from that file. Only what this machine needs is added: the
 * host's network, and the ports on its loopback.
 */

const ROOT = path.resolve(import.meta.dirname, '../..');
const MAX_MB = 300;
const image = inject('playbookImage');
const suffix = randomBytes(4).toString('hex');

describe('the build (npm run image)', () => {
  it(`prints the image's uncompressed size, under ${MAX_MB} MB`, async () => {
    const printed = /image \S+: (\d+) MB uncompressed \(at most 300\)/.exec(image.again.output);
    expect(printed, image.again.output).not.toBeNull();
    const bytes = Number((await podmanOk(['image', 'inspect', '--format', '{{.Size}}', IMAGE_TAG])).trim());
    expect(Math.ceil(bytes / 1e6)).toBe(Number(printed![1]));
    expect(bytes).toBeLessThan(MAX_MB * 1e6);
  });

  it('built again with nothing changed, reuses every layer', () => {
    // Podman numbers the stages of a multi-stage build: `[2/3] STEP 4/7: RUN …`.
    const steps = image.again.output
      .split('\n')
      .filter((line) => /^(\[\d+\/\d+\] )?STEP \d+\/\d+: /.test(line));
    const built = steps.filter((line) => !/STEP \d+\/\d+: FROM /.test(line));
    expect(built.length).toBeGreaterThan(10);
    const reused = image.again.output.split('\n').filter((line) => line.startsWith('--> Using cache '));
    expect(reused).toHaveLength(built.length);
  });

  it('labels the image, runs tini, as `node`, with a volume for the data and a health check of /healthz', async () => {
    const [inspected] = JSON.parse(await podmanOk(['image', 'inspect', IMAGE_TAG])) as {
      Config: {
        User: string;
        Labels: Record<string, string>;
        ExposedPorts: Record<string, unknown>;
        Volumes: Record<string, unknown>;
        Entrypoint: string[];
        Cmd: string[];
      };
      Healthcheck?: { Test: string[] };
    }[];
    const { version, license } = JSON.parse(await fs.readFile(path.join(ROOT, 'package.json'), 'utf8')) as {
      version: string;
      license: string;
    };
    const config = inspected!.Config;
    expect(config.Labels).toMatchObject({
      'org.opencontainers.image.version': version,
      'org.opencontainers.image.licenses': license,
    });
    expect(config.Labels).toHaveProperty('org.opencontainers.image.source');
    expect(config.User).toBe('node');
    expect(Object.keys(config.ExposedPorts)).toEqual(['8080/tcp']);
    expect(Object.keys(config.Volumes)).toEqual(['/app/data']);
    expect(config.Entrypoint.slice(0, 3)).toEqual(['tini', '--', 'node']);
    expect(config.Cmd).toEqual(['serve']);
    const check = inspected!.Healthcheck?.Test.join(' ') ?? '';
    expect(check).toContain('/healthz');
    expect(check).not.toContain('/readyz');
  });
});

describe('what the image holds', () => {
  let root: string;
  let files: string[];
  beforeAll(async () => {
    root = (await podmanOk(['image', 'mount', IMAGE_TAG])).trim();
    files = (await fs.readdir(root, { recursive: true })).map((file) => file.split(path.sep).join('/'));
  });
  afterAll(async () => {
    await podman(['image', 'unmount', IMAGE_TAG]);
  });
  const under = (folder: string) => files.filter((file) => file === folder || file.startsWith(`${folder}/`));

  it('the built service, its docs and demo content, and the build output of every workspace', async () => {
    for (const file of [
      'app/dist/cli/main.js',
      'app/bin/playbook.js',
      'app/package.json',
      'app/docs/README.md',
    ]) {
      expect(files).toContain(file);
    }
    expect(under('app/demo').length).toBeGreaterThan(0);
    const { workspaces } = JSON.parse(await fs.readFile(path.join(ROOT, 'package.json'), 'utf8')) as {
      workspaces: string[];
    };
    for (const workspace of workspaces) {
      expect(files).toContain(`app/${workspace}/package.json`);
      // The console's assets, the client library: whatever `npm run build` wrote into the workspace.
      const built = await fs.stat(path.join(ROOT, workspace, 'dist')).catch(() => undefined);
      if (built) expect(under(`app/${workspace}/dist`).length).toBeGreaterThan(0);
    }
  });

  it('no source, test, repository, cache, secret or data', () => {
    expect(under('app/src')).toEqual([]);
    expect(under('app/test')).toEqual([]);
    expect(
      files.filter((file) => /^app\/[^/]+(\/[^/]+)?\/src\//.test(file) && !file.includes('node_modules')),
    ).toEqual([]);
    expect(files.filter((file) => /(^|\/)\.git(\/|$)/.test(file))).toEqual([]);
    expect(files.filter((file) => file.includes('node_modules/.cache'))).toEqual([]);
    expect(files.filter((file) => file.startsWith('app/dist/') && /\.test\.(js|d\.ts)$/.test(file))).toEqual(
      [],
    );
    expect(
      files.filter((file) => file.startsWith('app/') && /(\.pem|\.key|(^|\/)\.env)$/.test(file)),
    ).toEqual([]);
    expect(under('app/data')).toEqual(['app/data']);
  });

  it('no dev dependency, and one native module: the SQLite driver its Node loads', async () => {
    const lock = JSON.parse(await fs.readFile(path.join(ROOT, 'package-lock.json'), 'utf8')) as {
      packages: Record<string, { dev?: boolean }>;
    };
    const devOnly = Object.entries(lock.packages)
      .filter(([location, entry]) => entry.dev === true && location.startsWith('node_modules/'))
      .map(([location]) => `app/${location}`);
    expect(devOnly.length).toBeGreaterThan(100);
    const present = new Set(files);
    expect(devOnly.filter((location) => present.has(location))).toEqual([]);
    // Node 24: better-sqlite3 13, its prebuilt binary for this platform alone (D1).
    expect(files.filter((file) => file.endsWith('.node'))).toEqual([
      'app/node_modules/better-sqlite3-napi/prebuilds/linux-x64.node',
    ]);
  });
});

describe('the embedded default, run as deploy/compose.yaml runs it', () => {
  const service: ComposeService = composeService('compose.yaml', 'playbook');
  const volume = `playbook-suite-data-${suffix}`;
  const containers: string[] = [];
  const graceSeconds = Number(/^(\d+)s$/.exec(service.stop_grace_period ?? '')?.[1]);
  let address: string;
  let metrics: string;
  let port: number;
  let writer: string;

  /** A container of the Compose service, on the same volume each time; resolves once it is healthy. */
  async function serving(): Promise<string> {
    const name = `playbook-suite-embedded-${suffix}-${containers.length}`;
    containers.push(name);
    const [, target] = service.volumes![0]!.split(':');
    const metricsPort = await freePort();
    metrics = `http://127.0.0.1:${metricsPort}/metrics`;
    await startContainer({
      name,
      args: service.command,
      env: {
        ...service.environment,
        // This machine: the host's network, free ports of its loopback.
        HOST: '127.0.0.1',
        PORT: String(port),
        PLAYBOOK_METRICS_PORT: String(metricsPort),
      },
      volumes: [`${volume}:${target}`],
      user: service.user,
    });
    await waitFor(
      'the container serving',
      async () => (await fetch(`${address}/healthz`).catch(() => undefined))?.status === 200,
      60_000,
    );
    return name;
  }

  beforeAll(async () => {
    expect(service.read_only).toBe(true);
    expect(service.tmpfs).toEqual(['/tmp']);
    expect(graceSeconds).toBeGreaterThan(0);
    port = await freePort();
    address = `http://127.0.0.1:${port}`;
    await podmanOk(['volume', 'create', volume]);
    await serving();
  }, 120_000);
  afterAll(async () => {
    await removeAll(containers, [volume]);
  });

  /** `podman exec` of the command line in the running container, as an operator runs it. */
  async function exec(...args: string[]): Promise<string> {
    return podmanOk(['exec', containers.at(-1)!, ...args]);
  }

  it('reads the demo Catalogs with a key made by `podman exec … playbook keys create`', async () => {
    const key = (
      await exec(
        'playbook',
        'keys',
        'create',
        '--account',
        'demo',
        '--name',
        'first',
        '--scope',
        'playbook:read',
      )
    ).trim();
    expect(key).toMatch(/^svc_sk_test_/);
    const answer = await fetch(`${address}/v3/playbook/catalogs`, { headers: { 'x-api-key': key } });
    expect(answer.status).toBe(200);
    const catalogs = (await answer.json()) as { meta: { total: number } };
    expect(catalogs.meta.total).toBe(4);
  });

  it('runs as `node`, never root, on a read-only root: it writes to the data volume and /tmp alone', async () => {
    expect((await exec('id', '-u')).trim()).toBe('1000');
    expect((await exec('id', '-un')).trim()).toBe('node');
    const inspected = JSON.parse(await podmanOk(['inspect', containers.at(-1)!])) as {
      HostConfig: { ReadonlyRootfs: boolean };
    }[];
    expect(inspected[0]!.HostConfig.ReadonlyRootfs).toBe(true);
    const denied = await podman(['exec', containers.at(-1)!, 'touch', '/app/written']);
    expect(denied.code).not.toBe(0);
    expect(denied.stderr).toContain('Read-only file system');
    await exec('sh', '-c', 'touch /tmp/written /app/data/written && rm /tmp/written /app/data/written');
  });

  it('passes its health check', async () => {
    expect((await podman(['healthcheck', 'run', containers.at(-1)!])).code).toBe(0);
  });

  it('keeps a published Catalog on its volume: a new container reads it back', async () => {
    writer = (
      await exec(
        'playbook',
        'keys',
        'create',
        '--account',
        'acme',
        '--name',
        'writer',
        '--scope',
        'playbook:read',
        '--scope',
        'playbook:write',
      )
    ).trim();
    const catalog = `${address}/v3/playbook/catalogs/org/kept`;
    const published = await fetch(catalog, {
      method: 'PUT',
      headers: { 'x-api-key': writer, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'Kept', version: '1', resources: [publishedResource('intro')] }),
    });
    expect(published.status).toBeLessThan(300);

    const first = containers.at(-1)!;
    await podmanOk(['stop', '--time', String(graceSeconds), first], (graceSeconds + 10) * 1000);
    expect((await podmanOk(['inspect', '--format', '{{.State.ExitCode}}', first])).trim()).toBe('0');
    await podmanOk(['rm', first]);

    await serving();
    const read = await fetch(catalog, { headers: { 'x-api-key': writer } });
    expect(read.status).toBe(200);
    expect(((await read.json()) as { name: string }).name).toBe('Kept');
  }, 90_000);

  it(`SIGTERM under load: /readyz fails, requests go on being served for the shutdown delay, then every request in flight is answered`, async () => {
    expect(service.stop_signal).toBe('SIGTERM');
    const name = containers.at(-1)!;
    const before = await acceptedKeys(metrics);
    const publications = [0, 1, 2].map(() => slowPublish(address, writer));
    // Awaited below; a test that fails before then leaves no rejection unhandled when its container goes.
    for (const publication of publications) publication.answer.catch(() => {});
    await inFlight(metrics, before + publications.length);

    await podmanOk(['kill', '--signal', service.stop_signal!, name]);
    await waitFor(
      'the stop begun',
      async () =>
        (await logMessages(name)).includes('stopping: /readyz fails; serving on for the shutdown delay'),
      10_000,
    );
    expect((await fetch(`${address}/readyz`)).status).toBe(503);
    // Load through the shutdown delay: every request is answered in full.
    const statuses: number[] = [];
    await Promise.all(
      [0, 1, 2, 3].map(async () => {
        for (let i = 0; i < 10; i++) {
          const answer = await fetch(`${address}/v3/playbook/catalogs`, { headers: { 'x-api-key': writer } });
          await answer.arrayBuffer();
          statuses.push(answer.status);
        }
      }),
    );
    expect(statuses).toEqual(Array(40).fill(200));

    await waitFor(
      'the drain begun',
      async () => (await logMessages(name)).includes('draining in-flight requests'),
      20_000,
    );
    for (const publication of publications) publication.finish();
    for (const answer of await Promise.all(publications.map((publication) => publication.answer))) {
      expect(answer.status).toBe(200);
      expect(JSON.parse(answer.body)).toMatchObject({ dryRun: true });
    }
    expect((await podmanOk(['wait', name], (graceSeconds + 10) * 1000)).trim()).toBe('0');
    expect((await logMessages(name)).at(-1)).toBe('stopped');
  }, 60_000);
});
