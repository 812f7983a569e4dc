import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { generateApiKey } from '../../src/schemas/api-key-format.js';
import { CONTROLS } from '../../src/schemas/common.js';
import { runCli, spawnCli } from '../helpers/cli.js';
import { folderSnapshot } from '../helpers/folder-snapshot.js';

const ROOT = path.resolve(import.meta.dirname, '../..');
const MIRROR = path.join(ROOT, 'examples/mirror-catalogs.mjs');
const run = promisify(execFile);

/**
 * D27: `playbook pull` and `examples/mirror-catalogs.mjs` against a service that answers what the real
 * one never sends: slugs, refs and ids that are paths, controls or too long, a detail that is not the
 * Resource listed, media types that are no media type's. A service (or anyone between it and a client
 * over plain HTTP) cannot make either write, replace or delete anything outside its folder, and what a
 * pull refuses is not written at all. The fake service is a node:http server shaped like the real
 * one's answers: the sync feed's pages and Resource details.
 */

const CATALOG_ID = '4b1c0c56-0d1e-4b7a-9a53-6d1f3b1f0c01';
const AT = '2025-01-02T03:04:05Z';
const HASH = 'a'.repeat(64);
const id = (n: number) => `7e57c0de-0000-4000-8000-${String(n).padStart(12, '0')}`;
/** Any character a terminal acts upon (D21). */
const TERMINAL_CONTROLS = new RegExp(`[${CONTROLS}]`);

function catalogItem() {
  return {
    type: 'catalog',
    catalog: {
      id: CATALOG_ID,
      sourceScope: 'account',
      owner: 'org',
      slug: 'handbook',
      humanRef: 'org/handbook',
      name: 'Handbook',
      status: 'active',
      createdAt: AT,
      updatedAt: AT,
      currentVersion: { id: id(900), version: '1', resourcePins: [], manifestHash: HASH, resourceCount: 0 },
    },
  };
}

type Fields = Record<string, unknown>;

function resourceFields(n: number, slug: unknown, fields: Fields = {}): Fields {
  return {
    id: id(n),
    catalogId: CATALOG_ID,
    catalogHumanRef: 'org/handbook',
    sourceScope: 'account',
    slug,
    humanRef: `org/handbook/${String(slug)}`,
    kind: 'document',
    title: `Resource ${n}`,
    status: 'active',
    manifest: {},
    createdAt: AT,
    updatedAt: AT,
    ...fields,
  };
}

/** A Resource as the sync feed lists it, and as its detail answers, content included. */
class FakeResource {
  constructor(
    readonly item: { readonly type: 'resource'; readonly resource: Fields },
    readonly detail: Fields,
  ) {}

  /** The same Resource listed with other fields than its detail's. */
  listedWith(fields: Fields): FakeResource {
    return new FakeResource(
      { type: 'resource', resource: { ...this.item.resource, ...fields } },
      this.detail,
    );
  }
}

function resource(n: number, slug: unknown, version: Fields = {}, detail: Fields = {}): FakeResource {
  const currentVersion = {
    id: id(n + 500),
    version: '1',
    contentHash: HASH,
    contentSizeBytes: 3,
    mediaType: 'text/markdown',
    storageBackend: 'database-text',
    status: 'published',
    manifest: {},
    content: `# Resource ${n}\n`,
    ...version,
  };
  return new FakeResource(
    { type: 'resource', resource: resourceFields(n, slug) },
    { ...resourceFields(n, slug), currentVersion, ...detail },
  );
}

/** One page of the sync feed: its items (a Resource's detail is kept beside), and the position it ends at. */
interface FakePage {
  readonly data: readonly unknown[];
  readonly next: string;
}

/**
 * The fake service: each sync request (by its `syncToken`, none for an initial sync) answers that
 * page of `pages`, or is held until the service closes when there is none, as the real service holds
 * a request that waits for a change; each detail answers as the last page served that lists it.
 */
class FakeService {
  readonly asked: string[] = [];
  private readonly server: http.Server;
  private readonly waiting = new Set<() => void>();
  url = '';

  constructor(pages: Record<string, FakePage>) {
    // A Resource's detail as it is now: as the last page served that lists it has it.
    const details = new Map<unknown, Fields>();
    this.server = http.createServer((request, response) => {
      const url = new URL(request.url ?? '/', 'http://127.0.0.1');
      this.asked.push(`${url.pathname}${url.search}`);
      for (const wake of this.waiting) wake();
      const send = (status: number, body: unknown) => {
        response.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
      };
      if (url.pathname === '/v3/playbook/sync') {
        const page = pages[url.searchParams.get('syncToken') ?? 'initial'];
        if (page === undefined) return;
        for (const entry of page.data) {
          if (entry instanceof FakeResource) details.set(entry.item.resource.id, entry.detail);
        }
        const data = page.data.map((entry) => (entry instanceof FakeResource ? entry.item : entry));
        send(200, { data, nextSyncToken: page.next });
        return;
      }
      const wanted = /^\/v3\/playbook\/resources\/([^/]+)$/.exec(url.pathname)?.[1];
      const found = details.get(decodeURIComponent(wanted ?? ''));
      if (found) send(200, found);
      else
        send(404, { type: '/docs/problems/not_found', title: 'Not found', status: 404, code: 'not_found' });
    });
  }

  async start(): Promise<this> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  /** Resolves once a request whose path and query hold `text` has been made. */
  askedFor(text: string): Promise<void> {
    return new Promise((resolve) => {
      const check = () => {
        if (this.asked.some((asked) => asked.includes(text))) {
          this.waiting.delete(check);
          resolve();
        }
      };
      this.waiting.add(check);
      check();
    });
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise((resolve) => this.server.close(resolve));
  }
}

function page(data: readonly unknown[], next: string): FakePage {
  return { data, next };
}

describe('pull and the mirror example against a hostile service (D27)', () => {
  let root: string;
  let tree: string;
  let services: FakeService[];
  const key = generateApiKey('test').key;

  beforeEach(async () => {
    root = await fs.mkdtemp(path.join(os.tmpdir(), 'playbook-hostile-'));
    tree = path.join(root, 'a', 'b', 'tree');
    services = [];
  });
  afterEach(async () => {
    for (const service of services) await service.close();
    await fs.rm(root, { recursive: true, force: true });
  });

  async function serve(pages: Record<string, FakePage>): Promise<FakeService> {
    const service = await new FakeService(pages).start();
    services.push(service);
    return service;
  }

  async function pull(service: FakeService) {
    return runCli(['pull', 'org/handbook', tree], { PLAYBOOK_URL: service.url, PLAYBOOK_API_KEY: key });
  }

  /** A first pull of one good Resource, so that a refused pull has a folder to leave as it was. */
  async function pulledOnce(): Promise<Record<string, string>> {
    const first = await pull(
      await serve({ initial: { data: [catalogItem(), resource(1, 'ok')], next: 's1' } }),
    );
    expect(first, first.stderr).toMatchObject({ code: 0, stderr: '' });
    return folderSnapshot(root);
  }

  const hostileSlugs: [string, unknown][] = [
    ['a path up and out', '../../../../evil-workflow'],
    ['an absolute path', '/tmp/evil-workflow'],
    ['backslashes', '..\\..\\..\\..\\evil-workflow'],
    ['a NUL', 'ok\u0000evil'],
    ['a slash', 'nested/evil'],
    ['one character too long', 'a'.repeat(121)],
    ['far too long for a file name', 'a'.repeat(5000)],
    ['terminal escape sequences', '\u001b]0;owned\u0007\u001b[2Jevil'],
    ['a direction override', 'evil\u202egnp'],
    ['capitals', 'Evil'],
    ['dots', '..'],
    ['nothing', ''],
    ['a number', 42],
  ];

  it.each(hostileSlugs)('refuses a slug that is %s, and writes nothing of that pull', async (_name, slug) => {
    const before = await pulledOnce();
    const hostile = resource(2, slug, { mediaType: 'application/yaml', content: 'evil: \u0001\n' });
    const changed = resource(1, 'ok', { content: '# Changed\n' });
    const refused = await pull(await serve({ initial: page([catalogItem(), changed, hostile], 's1') }));
    // Nothing written, inside the folder or around it: not even the good Resource's change.
    expect(await folderSnapshot(root)).toEqual(before);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(
      /^playbook: pull refused: a Resource of org\/handbook \(id "[^"]+", slug .*\): slug: .*; the folder is left as it was\n$/,
    );
    expect(refused.stderr.trimEnd()).not.toMatch(TERMINAL_CONTROLS);
  });

  it('refuses an id that is not one, and a detail that is not the Resource listed', async () => {
    const before = await pulledOnce();
    const cases = [
      resource(2, 'fine', {}, { slug: '../../../../evil-workflow' }),
      resource(3, 'fine', {}, { id: id(4) }),
      resource(5, 'fine', { mediaType: 'text/markdown\u001b[2J' }),
      resource(6, 'fine', { mediaType: `text/${'x'.repeat(120)}` }),
      resource(7, 'fine').listedWith({ id: '../x' }),
    ];
    for (const hostile of cases) {
      const refused = await pull(await serve({ initial: page([catalogItem(), hostile], 's1') }));
      expect(await folderSnapshot(root)).toEqual(before);
      expect(refused.code, refused.stdout).toBe(1);
      expect(refused.stderr).toMatch(/^playbook: pull refused: .*; the folder is left as it was\n$/);
      expect(refused.stderr.trimEnd()).not.toMatch(TERMINAL_CONTROLS);
    }
  });

  it('writes nothing at all when the first pull of a folder is refused', async () => {
    const hostile = resource(2, '../../../../evil-workflow');
    const refused = await pull(await serve({ initial: page([catalogItem(), hostile], 's1') }));
    // Not even the folders it would have made on the way.
    expect(await folderSnapshot(root)).toEqual({});
    expect(refused.code).toBe(1);
  });

  it('names content files from a closed list of extensions, whatever the media type', async () => {
    const pulled = await pull(
      await serve({
        initial: page(
          [
            catalogItem(),
            resource(1, 'one', { mediaType: 'constructor' }),
            resource(2, 'two', { mediaType: '__proto__' }),
            resource(3, 'three', { mediaType: 'text/../../../../evil; charset=utf-8', content: '\u0001' }),
          ],
          's1',
        ),
      }),
    );
    expect(pulled, pulled.stderr).toMatchObject({ code: 0, stderr: '' });
    expect(Object.keys(await folderSnapshot(root)).sort()).toEqual(
      [
        'a',
        'a/b',
        'a/b/tree',
        'a/b/tree/handbook',
        'a/b/tree/handbook/catalog.json',
        'a/b/tree/handbook/resources',
        'a/b/tree/handbook/resources/files',
        'a/b/tree/handbook/resources/files/one.bin',
        'a/b/tree/handbook/resources/files/three.txt',
        'a/b/tree/handbook/resources/files/two.bin',
        'a/b/tree/handbook/resources/one.json',
        'a/b/tree/handbook/resources/three.json',
        'a/b/tree/handbook/resources/two.json',
      ].sort(),
    );
  });

  it('--follow: a removal names nothing outside, and a page that renames a Resource out is refused whole', async () => {
    const victim = path.join(root, 'a', 'victim.json');
    await fs.mkdir(path.dirname(victim), { recursive: true });
    await fs.writeFile(victim, 'precious');
    const service = await serve({
      initial: page([catalogItem(), resource(1, 'ok')], 's1'),
      // Removals of ids never written, or that are not ids at all: nothing to remove.
      s1: page(
        [
          { type: 'removed', entity: 'resource', id: '../../../../victim' },
          { type: 'removed', entity: 'catalog', id: '../../../../victim' },
          { type: 'removed', entity: 'resource', id: id(99) },
        ],
        's2',
      ),
      // The Resource written, now named by a path to the victim, then removed.
      s2: page(
        [
          resource(1, '../../../../victim', { content: 'overwritten' }),
          { type: 'removed', entity: 'resource', id: id(1) },
        ],
        's3',
      ),
    });
    const followed = spawnCli(['pull', 'org/handbook', tree, '--follow'], {
      PLAYBOOK_URL: service.url,
      PLAYBOOK_API_KEY: key,
    });
    try {
      await followed.waitFor((text) => text.includes('pulled org/handbook'));
      // What the initial pull wrote: the first page of changes may be staging in a hidden folder
      // already, which is not part of it (and must be gone at the end).
      const pulled = Object.fromEntries(
        Object.entries(await folderSnapshot(root)).filter(
          ([at]) => !at.split('/').some((part) => part.startsWith('.')),
        ),
      );
      // Ends on the refusal; had the page been applied, it would ask what came after it.
      const ended = await Promise.race([followed.exited, service.askedFor('syncToken=s3').then(() => null)]);
      expect(await fs.readFile(victim, 'utf8').catch(() => 'removed')).toBe('precious');
      expect(await folderSnapshot(root)).toEqual(pulled);
      expect(ended, followed.stderr()).toEqual({ code: 1, signal: null });
      expect(followed.stderr()).toMatch(
        /^playbook: pull refused: a Resource of org\/handbook \(id "[^"]+", slug "..\/..\/..\/..\/victim"\): slug: .*; the folder is left as it was\n$/,
      );
    } finally {
      followed.child.kill('SIGKILL');
    }
  });

  it('--follow: a Catalog that leaves the view takes its Resource files with it, and nothing else', async () => {
    const service = await serve({
      initial: page([catalogItem(), resource(1, 'ok'), resource(2, 'binary', { content: '\u0001' })], 's1'),
      s1: page([{ type: 'removed', entity: 'catalog', id: CATALOG_ID }], 's2'),
    });
    // Files the pull does not own: a JSON file that is no Resource file, a file no Resource names.
    const resources = path.join(tree, 'handbook', 'resources');
    await fs.mkdir(path.join(resources, 'files'), { recursive: true });
    await fs.writeFile(path.join(resources, 'notes.json'), '{}');
    await fs.writeFile(path.join(resources, 'files', 'unrelated.bin'), 'kept');
    const followed = spawnCli(['pull', 'org/handbook', tree, '--follow'], {
      PLAYBOOK_URL: service.url,
      PLAYBOOK_API_KEY: key,
    });
    try {
      await followed.waitFor((text) => text.includes('- org/handbook: no longer readable'));
      await service.askedFor('syncToken=s2');
      expect(Object.keys(await folderSnapshot(path.join(tree, 'handbook'))).sort()).toEqual([
        'catalog.json',
        'resources',
        'resources/files',
        'resources/files/unrelated.bin',
        'resources/notes.json',
      ]);
      expect(followed.stdout()).toContain(
        "- org/handbook: no longer readable with this key; its Resources' files are removed\n",
      );
    } finally {
      followed.child.kill('SIGKILL');
    }
  });

  describe('examples/mirror-catalogs.mjs', () => {
    const mirror = () => path.join(root, 'a', 'b', 'mirror');

    async function runMirror(service: FakeService) {
      return run('node', [MIRROR, mirror()], {
        cwd: ROOT,
        env: { ...process.env, PLAYBOOK_API_KEY: key, PLAYBOOK_URL: service.url },
      }).then(
        ({ stdout, stderr }) => ({ code: 0, stdout, stderr }),
        (error: { code: number; stdout: string; stderr: string }) => error,
      );
    }

    it.each([
      ['a slug that leads out', resource(1, '../../../../evil-workflow')],
      ['a slug of terminal escapes', resource(1, '\u001b[2Jevil\u202e')],
      ['an overlong slug', resource(1, 'a'.repeat(300))],
      [
        'a Catalog ref that leads out',
        resource(1, 'ok').listedWith({ catalogHumanRef: 'org/../../../../x' }),
      ],
      ['an absolute Catalog ref', resource(1, 'ok').listedWith({ catalogHumanRef: '/tmp/x' })],
    ])('stops at %s, writing nothing of its page', async (_name, hostile) => {
      const service = await serve({
        initial: page([catalogItem(), resource(2, 'fine'), hostile], 's1'),
      });
      const before = await folderSnapshot(root);
      const refused = await runMirror(service);
      expect(await folderSnapshot(root)).toEqual(before);
      expect(refused.code).toBe(1);
      expect(refused.stderr).toMatch(
        /^mirror refused: the Resource .* is not named by a slug and a ref; nothing of that page was written\n$/,
      );
      expect(refused.stderr.trimEnd()).not.toMatch(TERMINAL_CONTROLS);
    });

    it('names files from a closed list of extensions, whatever the media type', async () => {
      const service = await serve({
        initial: page([catalogItem(), resource(1, 'one', { mediaType: 'constructor' })], 's1'),
      });
      const mirrored = await runMirror(service);
      expect(mirrored, mirrored.stderr).toMatchObject({ code: 0 });
      expect(await folderSnapshot(mirror())).toEqual({
        org: 'folder',
        'org/handbook': 'folder',
        'org/handbook/one.txt': 'file: # Resource 1\n',
      });
    });

    it('follows no symbolic link inside its folder: a folder or a file that is one stops it', async () => {
      const elsewhere = path.join(root, 'elsewhere');
      await fs.mkdir(path.join(elsewhere, 'handbook'), { recursive: true });
      await fs.writeFile(path.join(elsewhere, 'package.json'), '{"name":"kept"}');
      const service = await serve({ initial: page([catalogItem(), resource(1, 'ok')], 's1') });

      await fs.mkdir(mirror(), { recursive: true });
      await fs.symlink(elsewhere, path.join(mirror(), 'org'));
      const before = await folderSnapshot(root);
      const throughFolder = await runMirror(service);
      expect(await folderSnapshot(root)).toEqual(before);
      expect(throughFolder.code).toBe(1);
      expect(throughFolder.stderr).toMatch(/^mirror refused: .*org is not a real folder\n$/);

      await fs.rm(path.join(mirror(), 'org'));
      await fs.mkdir(path.join(mirror(), 'org', 'handbook'), { recursive: true });
      await fs.symlink(path.join(elsewhere, 'package.json'), path.join(mirror(), 'org', 'handbook', 'ok.md'));
      const atFile = await folderSnapshot(root);
      const throughFile = await runMirror(service);
      expect(await folderSnapshot(root)).toEqual(atFile);
      expect(throughFile.code).toBe(1);
      expect(throughFile.stderr).toMatch(/^mirror refused: .*ok\.md is not a real file\n$/);
    });
  });
});
