import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import type { FastifyInstance } from 'fastify';
import { publint } from 'publint';
import { formatMessage } from 'publint/utils';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listenLocally } from '../helpers/app.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { givenAccount, givenCatalog, givenResource } from '../helpers/fixtures.js';

const ROOT = path.resolve(import.meta.dirname, '../..');
const CLIENT = path.join(ROOT, 'clients/typescript');
const BIN = path.join(ROOT, 'node_modules/.bin');
const TSC = path.join(ROOT, 'node_modules/typescript/bin/tsc');
const run = promisify(execFile);

/** What the package's publisher has: its sources and build files, without dist/ or node_modules. */
const PACKAGE_SOURCES = ['package.json', 'README.md', 'src', 'scripts', 'tsconfig.json', 'tsconfig.cjs.json'];

/**
 * The environment of a child npm or node: this one's, less what `npm test` sets for its own run (an
 * `npm_config_*` or `npm_package_*` variable would point a child npm back at this repository).
 */
function childEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env)) {
    if (!/^npm_/i.test(name) && name !== 'INIT_CWD') env[name] = value;
  }
  return { ...env, ...extra };
}

/** Runs a command; on failure, the error names its output, which a bare exit code would not. */
async function exec(file: string, args: string[], cwd: string, env = childEnv()) {
  try {
    return await run(file, args, { cwd, env, maxBuffer: 16 * 1024 * 1024 });
  } catch (error) {
    const { stdout, stderr } = error as { stdout?: string; stderr?: string };
    throw new Error(`${file} ${args.join(' ')} failed in ${cwd}:\n${stdout ?? ''}\n${stderr ?? ''}`);
  }
}

/** Reads a Catalog, a Resource by ref, a page, a refusal and a cached answer; prints what it saw. */
const consumerScript = (moduleSystem: 'esm' | 'cjs') => `${
  moduleSystem === 'esm'
    ? `import { createRequire } from 'node:module';
import * as client from '@playbook/client';
const require = createRequire(import.meta.url);
const other = require('@playbook/client');
const resolved = import.meta.resolve('@playbook/client');`
    : `const client = require('@playbook/client');
const other = null;
const resolved = require.resolve('@playbook/client');`
}
const { Playbook, PlaybookError, parseApiKey } = client;

async function main() {
  const requestIds = [];
  const playbook = new Playbook({
    apiKey: process.env.PLAYBOOK_API_KEY,
    baseUrl: process.env.PLAYBOOK_URL,
    cache: true,
    onResponse: (info) => requestIds.push(info.requestId),
  });
  const catalog = await playbook.catalogs.get('svc', 'handbook');
  const intro = await playbook.resources.getByRef('svc', 'handbook', 'intro', {
    headers: { 'x-request-id': 'from-${moduleSystem}' },
  });
  const again = await playbook.resources.getByRef('svc', 'handbook', 'intro');
  const slugs = [];
  for await (const item of playbook.resources.iterate('svc', 'handbook', { pageSize: 1 })) slugs.push(item.slug);
  let refusal;
  try {
    await playbook.resources.getByRef('svc', 'handbook', 'nothing-here');
  } catch (error) {
    refusal = {
      status: error.status,
      code: error.code,
      isPlaybookError: error instanceof PlaybookError,
      isTheOtherBuildsError: other === null ? null : error instanceof other.PlaybookError,
    };
  }
  // A module throws on a write to a frozen object; a CommonJS script ignores it. Either way it holds.
  try {
    again.currentVersion.content = 'changed';
  } catch {}
  const mutation = again.currentVersion.content === 'changed' ? 'changed' : 'refused';
  console.log(JSON.stringify({
    resolved,
    exports: Object.keys(client).filter((name) => name !== 'default' && name !== 'module.exports').sort(),
    otherBuild: other === null ? null : other.Playbook !== Playbook,
    catalog: catalog.humanRef,
    pins: catalog.currentVersion?.resourcePins.length ?? 0,
    content: intro.currentVersion.content,
    cachedIsSame: again === intro,
    mutation,
    slugs,
    refusal,
    requestId: requestIds[1],
    keyId: parseApiKey(process.env.PLAYBOOK_API_KEY).keyId,
  }));
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
`;

/** A TypeScript consumer: typed answers, and wrong uses that must not type-check. */
const CONSUMER_TYPES = `import { type Catalog, Playbook, PlaybookError, type Resource } from '@playbook/client';

const playbook = new Playbook({ apiKey: 'svc_sk_test_x', baseUrl: 'http://127.0.0.1:8080', cache: true });

export async function read(signal: AbortSignal): Promise<string> {
  const catalog: Catalog = await playbook.catalogs.get('svc', 'handbook', { signal });
  const resource: Resource = await playbook.resources.getByRef('org', catalog.slug, 'intro', {
    headers: { 'x-request-id': 'typed' },
  });
  // @ts-expect-error an owner is svc or org
  await playbook.catalogs.get('acme', 'handbook');
  // @ts-expect-error content is text
  const size: number = resource.currentVersion.content;
  try {
    await playbook.versions.get(resource.id, resource.currentVersion.id);
  } catch (error) {
    if (error instanceof PlaybookError) return \`\${error.status} \${error.code} \${size}\`;
  }
  return resource.currentVersion.content;
}
`;

/** D24, D29: `@playbook/client` as a user installs it, from its tarball, in a project of their own. */
describe('@playbook/client packed and installed outside the repository (D29)', () => {
  let work: string;
  let tarball: string;
  let packed: string[];

  beforeAll(async () => {
    // Built and packed from a copy, away from the checkout: the package is what its own files make,
    // and the dist/ that other tests import is never rewritten under them.
    work = await fs.mkdtemp(path.join(os.tmpdir(), 'playbook-client-'));
    const source = path.join(work, 'source');
    for (const entry of PACKAGE_SOURCES) {
      await fs.cp(path.join(CLIENT, entry), path.join(source, entry), { recursive: true });
    }
    const env = childEnv({ PATH: `${BIN}${path.delimiter}${process.env.PATH}` });
    const { stdout } = await exec('npm', ['pack', '--json', '--pack-destination', work], source, env);
    const [report] = JSON.parse(stdout) as [{ filename: string; files: { path: string }[] }];
    tarball = path.join(work, report.filename);
    packed = report.files.map((file) => file.path).sort();
  }, 240_000);
  afterAll(async () => {
    if (work) await fs.rm(work, { recursive: true, force: true });
  });

  it('packs an ESM and a CommonJS build with their declarations, its README and package.json, and nothing else', async () => {
    const modules = [
      'api-key',
      'client',
      'errors',
      'index',
      'openapi',
      'origins',
      'pages',
      'sync',
      'transport',
      'webhook-endpoints',
      'webhooks',
    ];
    const expected = [
      'README.md',
      'dist/cjs/package.json',
      'package.json',
      ...['esm', 'cjs'].flatMap((build) =>
        modules.flatMap((name) => [`dist/${build}/${name}.d.ts`, `dist/${build}/${name}.js`]),
      ),
    ].sort();
    expect(packed).toEqual(expected);
    const manifest = JSON.parse(await fs.readFile(path.join(CLIENT, 'package.json'), 'utf8'));
    expect(manifest.private).toBeUndefined();
    expect(manifest.dependencies ?? {}).toEqual({});
    expect(manifest.license).toBe(
      JSON.parse(await fs.readFile(path.join(ROOT, 'package.json'), 'utf8')).license,
    );
    expect(manifest.exports['.']).toEqual({
      import: { types: './dist/esm/index.d.ts', default: './dist/esm/index.js' },
      require: { types: './dist/cjs/index.d.ts', default: './dist/cjs/index.js' },
    });
  });

  it('passes publint, strict: not a suggestion', async () => {
    const bytes = await fs.readFile(tarball);
    const { messages, pkg } = await publint({
      pack: { tarball: bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength) },
      strict: true,
    });
    expect(messages.map((message) => `${message.type}: ${formatMessage(message, pkg)}`)).toEqual([]);
  });

  it('passes "are the types wrong" under node10, node16 from CommonJS and from ESM, and bundlers', async () => {
    // attw exits 1 on any problem, and its table names each.
    const { stdout } = await exec(path.join(BIN, 'attw'), [tarball, '--format', 'table-flipped'], work);
    expect(stdout).toMatch(/No problems found/);
  }, 60_000);

  describe('in an empty project, against a running service', () => {
    let backend: TestBackend;
    let identity: TestIdentity;
    let app: FastifyInstance;
    let project: string;
    let env: NodeJS.ProcessEnv;
    let keyId: string;

    beforeAll(async () => {
      project = path.join(work, 'consumer');
      await fs.mkdir(project);
      await fs.writeFile(
        path.join(project, 'package.json'),
        JSON.stringify({ name: 'consumer', version: '1.0.0', private: true }),
      );
      // Offline: a package with no dependencies installs from its tarball alone.
      await exec('npm', ['install', tarball, '--offline', '--no-audit', '--no-fund'], project);

      backend = await createTestBackend();
      identity = createTestIdentity(backend);
      app = await buildIdentityApp(backend, identity);
      const baseUrl = await listenLocally(app);
      await givenAccount(backend.databases.primary, 'acme');
      const handbook = await givenCatalog(backend.databases.primary, { slug: 'handbook' });
      await givenResource(backend, handbook, {
        slug: 'intro',
        versions: [{ version: '1', content: '# Intro\n' }],
      });
      await givenResource(backend, handbook, { slug: 'outro' });
      const minted = await identity.mintKey({ accountId: 'acme' });
      keyId = minted.key.split('_')[3]!;
      env = childEnv({ PLAYBOOK_API_KEY: minted.key, PLAYBOOK_URL: baseUrl });
    }, 240_000);
    afterAll(async () => {
      await app?.close();
      await identity?.close();
      await backend?.cleanup();
    });

    it('installs as a dependency of the project, from the tarball', async () => {
      const manifest = JSON.parse(await fs.readFile(path.join(project, 'package.json'), 'utf8'));
      expect(manifest.dependencies['@playbook/client']).toMatch(/^file:.*playbook-client-0\.1\.0\.tgz$/);
      const installed = path.join(project, 'node_modules/@playbook/client');
      expect((await fs.lstat(installed)).isSymbolicLink()).toBe(false);
      expect(await fs.readdir(installed)).toEqual(expect.arrayContaining(['dist', 'package.json']));
    });

    for (const moduleSystem of ['esm', 'cjs'] as const) {
      it(`works from ${moduleSystem === 'esm' ? 'import' : 'require'}: reads by ref, pages, a refusal, a frozen cached answer`, async () => {
        const script = path.join(project, `read.${moduleSystem === 'esm' ? 'mjs' : 'cjs'}`);
        await fs.writeFile(script, consumerScript(moduleSystem));
        const { stdout } = await exec(process.execPath, [script], project, env);
        const seen = JSON.parse(stdout);
        const build = moduleSystem === 'esm' ? 'dist/esm/index.js' : 'dist/cjs/index.js';
        expect(seen.resolved.replace(/^file:\/\//, '')).toBe(
          path.join(project, 'node_modules/@playbook/client', build),
        );
        expect(seen).toMatchObject({
          exports: [
            'MemoryCache',
            'Playbook',
            'PlaybookError',
            'PlaybookSync',
            'WebhookVerificationError',
            'isLoopbackUrl',
            'parseApiKey',
            'signInForDevelopment',
            'verifyWebhook',
          ],
          otherBuild: moduleSystem === 'esm' ? true : null,
          catalog: 'svc/handbook',
          content: '# Intro\n',
          cachedIsSame: true,
          mutation: 'refused',
          slugs: ['intro', 'outro'],
          // Either build's class knows the other's errors: a program may load both.
          refusal: {
            status: 404,
            code: 'not_found',
            isPlaybookError: true,
            isTheOtherBuildsError: moduleSystem === 'esm' ? true : null,
          },
          requestId: `from-${moduleSystem}`,
          keyId,
        });
      });
    }

    it.each([
      ['node16', ['--module', 'node16', '--moduleResolution', 'node16']],
      ['nodenext', ['--module', 'nodenext', '--moduleResolution', 'nodenext']],
      ['bundler', ['--module', 'preserve', '--moduleResolution', 'bundler']],
    ])(
      'type-checks an ESM (.mts) and a CommonJS (.cts) consumer under %s resolution',
      async (_mode, flags) => {
        await fs.writeFile(path.join(project, 'consumer.mts'), CONSUMER_TYPES);
        await fs.writeFile(path.join(project, 'consumer.cts'), CONSUMER_TYPES);
        const common = ['--noEmit', '--strict', '--target', 'es2022', '--lib', 'es2022'];
        // Node's globals (fetch, AbortSignal) from @types/node, as a Node project has them.
        const node = ['--types', 'node', '--typeRoots', path.join(ROOT, 'node_modules/@types')];
        // skipLibCheck is off: the package's own declarations are checked too. Each @ts-expect-error
        // above fails the check unless the package's types refuse that line.
        await exec(
          process.execPath,
          [TSC, ...common, ...node, ...flags, 'consumer.mts', 'consumer.cts'],
          project,
        );
      },
      // Checking @types/node and the package's declarations takes a few seconds of a core, each mode.
      120_000,
    );
  });
});
