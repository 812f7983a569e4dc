import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { ListObjectsV2Command } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DRAIN_TIMEOUT_MS } from '../../src/cli/serve.js';
import { createTestBackend, s3AdminClientFor, type TestBackend } from '../helpers/backend.js';
import {
  composeService,
  envNames,
  envValue,
  type KubernetesContainer,
  type KubernetesPod,
  kubernetesPod,
} from '../helpers/deploy-examples.js';
import { JwksServer, liveEnv, type SigningKey, sign, signingKey } from '../helpers/jwks.js';
import { type ContainerOptions, podmanOk, removeAll, runToEnd, startContainer } from '../helpers/podman.js';
import { publishedResource } from '../helpers/publish-bodies.js';
import { freePort } from '../helpers/servers.js';
import { selfSignedCertificate } from '../helpers/tls.js';
import { waitFor } from '../helpers/wait.js';

/**
 * The image in production, run as deploy/kubernetes/ runs it (the Job's and the Deployment's command,
 * environment, user, read-only root and probes' paths come from those files), against the suite's
 * PostgreSQL, Redis and S3 servers, in `live` with an identity provider whose key set the test serves
 * over https: migrations by one-off containers, instances that never migrate.
 */

const FIRST_MIGRATION = '0001-catalogs';
/** Where the container finds the test's certificate authority, mounted from the host. */
const CA_IN_CONTAINER = '/run/playbook-test-ca.pem';

describe('production, run as deploy/kubernetes/ runs it', () => {
  const deployment: KubernetesPod = kubernetesPod('playbook.yaml', 'Deployment');
  const job: KubernetesPod = kubernetesPod('migrate-job.yaml', 'Job');
  const instance: KubernetesContainer = deployment.containers[0]!;
  const migrate: KubernetesContainer = job.containers[0]!;
  const suffix = randomBytes(4).toString('hex');
  const containers: string[] = [];
  let backend: TestBackend;
  let jwks: JwksServer;
  let provider: SigningKey;
  let values: Record<string, string>;
  let caFile: string;

  beforeAll(async () => {
    // A schema behind the image's: its migrations are the Job's to run.
    backend = await createTestBackend({ migrateTo: FIRST_MIGRATION });
    const certificate = await selfSignedCertificate(path.join(backend.workDir, 'tls'));
    caFile = certificate.certFile;
    await fs.chmod(caFile, 0o644);
    jwks = new JwksServer(certificate);
    provider = await signingKey('provider-1', 'ES256');
    jwks.keys = [provider.publicJwk];
    const jwksUrl = await jwks.start();
    // What the suite's servers give each variable the files name; a name the test cannot fill fails.
    values = {
      ...backend.env,
      ...liveEnv(jwksUrl),
      PLAYBOOK_REDIS_URL: backend.redisUrl!,
      PLAYBOOK_SHUTDOWN_DELAY_MS: envValue(instance, 'PLAYBOOK_SHUTDOWN_DELAY_MS') ?? '',
      LOG_LEVEL: envValue(instance, 'LOG_LEVEL') ?? '',
    };
  });
  afterAll(async () => {
    await removeAll(containers);
    await jwks?.stop();
    await backend?.cleanup();
  });

  /** A container of `container`'s spec: its args, and its environment's names with the suite's values. */
  function options(
    container: KubernetesContainer,
    pod: KubernetesPod,
    machine: Record<string, string>,
  ): ContainerOptions {
    const name = `playbook-suite-${container.name}-${suffix}-${containers.length}`;
    containers.push(name);
    const env = Object.fromEntries(
      envNames(container).map((variable) => {
        const value = values[variable];
        if (value === undefined)
          throw new Error(`the test has no value for ${variable}, which deploy/kubernetes/ sets`);
        return [variable, value];
      }),
    );
    return {
      name,
      args: container.args,
      env: { ...env, NODE_EXTRA_CA_CERTS: CA_IN_CONTAINER, ...machine },
      user: `${pod.securityContext.runAsUser}:${pod.securityContext.runAsGroup}`,
      volumes: [`${caFile}:${CA_IN_CONTAINER}:ro`],
      // Kubernetes makes no volume of the image's own: production writes nothing to /app/data.
      imageVolumes: false,
    };
  }

  async function startInstance(): Promise<{ name: string; address: string }> {
    const port = await freePort();
    const name = await startContainer(
      options(instance, deployment, { HOST: '127.0.0.1', PORT: String(port) }),
    );
    const address = `http://127.0.0.1:${port}`;
    const probe = instance.readinessProbe!.httpGet.path;
    await waitFor(
      `${name} ready`,
      async () => (await fetch(`${address}${probe}`).catch(() => undefined))?.status === 200,
      60_000,
    );
    return { name, address };
  }

  it('the examples run what this test runs: the same environment, user, read-only root, probes and stop', () => {
    expect(migrate.args).toEqual(['migrate']);
    expect(instance.args).toEqual(['serve', '--no-migrate']);
    expect(envNames(migrate)).toEqual(
      envNames(instance).filter((name) => name !== 'PLAYBOOK_SHUTDOWN_DELAY_MS'),
    );
    for (const pod of [deployment, job]) {
      expect(pod.securityContext).toEqual({ runAsNonRoot: true, runAsUser: 1000, runAsGroup: 1000 });
      const container = pod.containers[0]!;
      expect(container.securityContext.readOnlyRootFilesystem).toBe(true);
      const tmp = container.volumeMounts.find((mount) => mount.mountPath === '/tmp')!;
      expect(pod.volumes.find((volume) => volume.name === tmp.name)?.emptyDir).toEqual({});
    }
    expect(instance.readinessProbe!.httpGet.path).toBe('/readyz');
    expect(instance.livenessProbe!.httpGet.path).toBe('/healthz');
    expect(instance.startupProbe!.httpGet.path).toBe('/healthz');
    expect(instance.ports).toEqual([{ name: 'http', containerPort: 8080 }]);
    // The shutdown delay and the drain fit in the grace period, in Kubernetes and in Compose alike.
    const delayMs = Number(envValue(instance, 'PLAYBOOK_SHUTDOWN_DELAY_MS'));
    expect(delayMs).toBeGreaterThan(0);
    expect(deployment.terminationGracePeriodSeconds! * 1000).toBeGreaterThan(delayMs + DRAIN_TIMEOUT_MS);
    for (const [file, name] of [
      ['compose.production.yaml', 'playbook'],
      ['compose.production.yaml', 'migrate'],
    ] as const) {
      const service = composeService(file, name);
      expect(service.command).toEqual(name === 'migrate' ? migrate.args : instance.args);
      expect(Object.keys(service.environment).sort()).toEqual(
        (name === 'migrate' ? envNames(migrate) : envNames(instance))
          .concat(name === 'migrate' ? ['PLAYBOOK_SHUTDOWN_DELAY_MS'] : [])
          .sort(),
      );
      expect(service.user).toBe('1000:1000');
      expect(service.read_only).toBe(true);
    }
    const compose = composeService('compose.production.yaml', 'playbook');
    expect(compose.stop_signal).toBe('SIGTERM');
    expect(Number(/^(\d+)s$/.exec(compose.stop_grace_period!)![1]) * 1000).toBeGreaterThan(
      Number(compose.environment.PLAYBOOK_SHUTDOWN_DELAY_MS) + DRAIN_TIMEOUT_MS,
    );
  });

  it('an instance refuses to start on a schema behind its version, naming `playbook migrate`', async () => {
    const port = await freePort();
    const refused = await runToEnd(options(instance, deployment, { HOST: '127.0.0.1', PORT: String(port) }));
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(
      /schema is behind this version of playbook .*: run `playbook migrate`, then start again/,
    );
  }, 60_000);

  it('two migration Jobs at once: both succeed, one migrates and the other finds nothing to do', async () => {
    const runs = await Promise.all([
      runToEnd(options(migrate, job, {})),
      runToEnd(options(migrate, job, {})),
    ]);
    expect(runs.map((run) => run.code)).toEqual([0, 0]);
    const outputs = runs.map((run) => run.stdout.trim()).sort();
    expect(outputs[0]).toMatch(/^applied 0002-/);
    expect(outputs[1]).toBe('schema is up to date');
  }, 120_000);

  it('two instances that never migrate share PostgreSQL, S3 and Redis: a write on one reads on the other', async () => {
    const [first, second] = await Promise.all([startInstance(), startInstance()]);
    const token = await sign(provider, { sub: 'ada', accounts: ['acme'] });
    const created = await fetch(`${first!.address}/v3/identity/api-keys`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        name: 'from the provider',
        accountId: 'acme',
        scopes: ['playbook:read', 'playbook:write'],
      }),
    });
    expect(created.status).toBe(201);
    const { key: secret } = (await created.json()) as { key: string };
    expect(secret).toMatch(/^svc_sk_live_/);

    // Content large enough to be kept in the object store.
    const large = `# Large\n\n${'x'.repeat(80 * 1024)}\n`;
    const published = await fetch(`${first!.address}/v3/playbook/catalogs/org/shared`, {
      method: 'PUT',
      headers: { 'x-api-key': secret, 'content-type': 'application/json' },
      body: JSON.stringify({
        name: 'Shared',
        version: '1',
        resources: [publishedResource('large', { content: large })],
      }),
    });
    expect(published.status).toBeLessThan(300);
    const read = await fetch(`${second!.address}/v3/playbook/catalogs/org/shared`, {
      headers: { 'x-api-key': secret },
    });
    expect(read.status).toBe(200);
    expect(((await read.json()) as { name: string }).name).toBe('Shared');
    const objects = await s3AdminClientFor(backend).send(
      new ListObjectsV2Command({ Bucket: /^s3:\/\/([^/]+)/.exec(values.PLAYBOOK_CONTENT_STORE!)![1]! }),
    );
    expect(objects.KeyCount).toBeGreaterThan(0);

    // Each stops as Kubernetes stops it, within the grace period, and exits 0.
    const grace = deployment.terminationGracePeriodSeconds!;
    await Promise.all(
      [first!, second!].map((started) =>
        podmanOk(['stop', '--time', String(grace), started.name], (grace + 10) * 1000),
      ),
    );
    for (const started of [first!, second!]) {
      expect((await podmanOk(['inspect', '--format', '{{.State.ExitCode}}', started.name])).trim()).toBe('0');
    }
  }, 180_000);
});
