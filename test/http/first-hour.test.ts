import fs from 'node:fs/promises';
import path from 'node:path';
import { Writable } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { main } from '../../src/cli/program.js';
import { loadConfig } from '../../src/foundation/config.js';
import { PROJECT_ROOT } from '../../src/foundation/project-root.js';
import { REDACTED_PATHS } from '../../src/http/access-log.js';
import { importTree } from '../../src/import/import-tree.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { givenAccount } from '../helpers/fixtures.js';
import { catalogJson, newTreeDir, resourceJson, writeTree } from '../import/support.js';

class Capture extends Writable {
  text = '';
  override _write(chunk: Buffer, _encoding: string, done: () => void): void {
    this.text += chunk.toString('utf8');
    done();
  }
  lines(): Record<string, unknown>[] {
    return this.text
      .split('\n')
      .filter(Boolean)
      .map((line) => JSON.parse(line) as Record<string, unknown>);
  }
}

/** What got in the way of a new user's first hour (issue 11), each fixed and kept fixed. */
describe("a new user's first hour", () => {
  let backend: TestBackend;
  let identity: TestIdentity;
  let app: FastifyInstance;
  const logs = new Capture();

  beforeAll(async () => {
    backend = await createTestBackend();
    const logger = pino({ level: 'info', redact: { paths: REDACTED_PATHS, censor: '[redacted]' } }, logs);
    identity = createTestIdentity(backend, { logger });
    app = await buildIdentityApp(backend, identity, logger);
    await givenAccount(backend.databases.primary, 'acme');
  });
  afterAll(async () => {
    await app.close();
    await identity.close();
    await backend.cleanup();
  });

  async function cli(args: string[]) {
    const stdout = new Capture();
    const stderr = new Capture();
    const code = await main(['node', 'playbook', ...args], backend.env, { stdout, stderr });
    return { code, stdout: stdout.text, stderr: stderr.text };
  }

  it('playbook --version prints the version of the package', async () => {
    const { version } = JSON.parse(await fs.readFile(path.join(PROJECT_ROOT, 'package.json'), 'utf8'));
    expect(await cli(['--version'])).toEqual({ code: 0, stdout: `${version}\n`, stderr: '' });
    expect((await cli(['-V'])).stdout).toBe(`${version}\n`);
  });

  it('GET / says where the documentation is, and so does the start-up banner', async () => {
    const root = await app.inject({ url: '/' });
    expect(root.statusCode).toBe(200);
    expect(root.json()).toMatchObject({ documentation: '/docs', openapi: '/v3/openapi.json' });
    expect(identity.gettingStarted('http://127.0.0.1:8080')[0]).toContain('http://127.0.0.1:8080/docs');
  });

  it('keeps its data in the project folder whatever folder a command runs from', () => {
    const here = process.cwd();
    try {
      process.chdir(backend.workDir);
      expect(loadConfig({}).dataDir).toBe(path.join(PROJECT_ROOT, 'data'));
      expect(loadConfig({ PLAYBOOK_DATA_DIR: 'elsewhere' }).dataDir).toBe(
        path.join(backend.workDir, 'elsewhere'),
      );
    } finally {
      process.chdir(here);
    }
  });

  it('logs a 401 and a 403 with their reason in the one access line, and no secret', async () => {
    const { key, id } = await identity.mintKey({ accountId: 'acme', scopes: ['playbook:write'] });
    const forbidden = await app.inject({ url: '/v3/playbook/catalogs', headers: { 'x-api-key': key } });
    expect(forbidden.statusCode).toBe(403);
    const refused = await app.inject({ url: '/v3/playbook/catalogs', headers: { 'x-api-key': `${key}x` } });
    expect(refused.statusCode).toBe(401);
    const lines = logs.lines().filter((line) => line.msg === 'request');
    const of = (requestId: unknown) => lines.filter((line) => line.reqId === requestId);
    expect(of(forbidden.headers['x-request-id'])).toEqual([
      expect.objectContaining({
        op: 'listPlaybookCatalogs',
        status: 403,
        code: 'forbidden',
        detail: 'this operation needs the playbook:read scope',
        keyId: id,
        account: 'acme',
      }),
    ]);
    expect(of(refused.headers['x-request-id'])).toEqual([
      expect.objectContaining({ status: 401, code: 'unauthenticated', detail: 'the API key is malformed' }),
    ]);
    expect(logs.text).not.toContain(key);
  });

  it('tells a user who sends a key as a bearer token to use x-api-key', async () => {
    const { key } = await identity.mintKey({ accountId: 'acme' });
    const answer = await app.inject({
      url: '/v3/playbook/catalogs',
      headers: { authorization: `Bearer ${key}` },
    });
    expect(answer.statusCode).toBe(401);
    expect(answer.json().detail).toBe(
      'the access token is malformed: this looks like an API key, which goes in the x-api-key header, not Authorization: Bearer',
    );
    expect(answer.body).not.toContain(key);
  });

  it('gives the line and column of a JSON syntax error in an import file', async () => {
    const dir = await newTreeDir(backend);
    await writeTree(dir, {
      'handbook/catalog.json': catalogJson(),
      'handbook/resources/broken.json': '{\n  "kind": "document",\n  "title": "x"\n  "version": "1"\n}\n',
    });
    const failed = await importTree(
      { db: backend.databases.primary, objectStore: backend.objectStore },
      { dir, owner: { kind: 'svc' } },
    ).catch((error: { problems: string[] }) => error);
    expect((failed as { problems: string[] }).problems).toEqual([
      expect.stringMatching(/^handbook\/resources\/broken\.json: is not valid JSON \(.*line 4 column 3.*\)$/),
    ]);
  });

  it('says so when playbook import is given one catalog folder instead of the tree', async () => {
    const dir = await newTreeDir(backend);
    await writeTree(dir, {
      'handbook/catalog.json': catalogJson(),
      'handbook/resources/a.json': resourceJson(),
    });
    const result = await cli(['import', path.join(dir, 'handbook'), '--owner', 'svc']);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(
      `is a catalog folder (it holds catalog.json); give the folder that holds catalog folders: ${dir}`,
    );
    expect(result.stderr).not.toContain('resources/catalog.json');
  });
});
