import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DOCS_DIR, pageUrl, renderDocs } from '../../src/docs/docs-site.js';
import { type ProblemCode as Code, ProblemCode, problemTypeUrl } from '../../src/schemas/common.js';
import { buildTestApp, PrincipalRegistry } from '../helpers/app.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';

const ROOT = path.resolve(import.meta.dirname, '../..');

/** Every Markdown file of docs/, relative to it. */
async function docsFiles(): Promise<string[]> {
  const entries = await fs.readdir(DOCS_DIR, { recursive: true, withFileTypes: true });
  return entries
    .filter((entry) => entry.isFile() && entry.name.endsWith('.md'))
    .map((entry) =>
      path.relative(DOCS_DIR, path.join(entry.parentPath, entry.name)).split(path.sep).join('/'),
    )
    .sort();
}

const hrefs = (html: string) => [...html.matchAll(/href="([^"]*)"/g)].map((match) => match[1]!);
const ids = (html: string) => new Set([...html.matchAll(/\bid="([^"]*)"/g)].map((match) => match[1]!));
/** The text a reader sees: the page without its tags. */
const readable = (html: string) => html.replace(/<[^>]*>/g, ' ');

/** Decision ids (D1…D99): the design record's, which text a user reads must not need. */
const DECISION_ID = /\bD[1-9][0-9]?\b/;

/** Markdown links of a file: `[text](target)`, outside code. */
function markdownLinks(markdown: string): string[] {
  const prose = markdown.replace(/```[\s\S]*?```/g, '').replace(/`[^`\n]*`/g, '');
  return [...prose.matchAll(/\]\(([^)\s]+)\)/g)].map((match) => match[1]!);
}

describe('the docs pages under /docs', () => {
  let backend: TestBackend;
  let app: FastifyInstance;
  let files: string[];

  beforeAll(async () => {
    backend = await createTestBackend();
    app = await buildTestApp(backend, new PrincipalRegistry());
    files = await docsFiles();
  });
  afterAll(async () => {
    await app.close();
    await backend.cleanup();
  });

  const get = (url: string, headers: Record<string, string> = {}) =>
    app.inject({ method: 'GET', url, headers });

  it('serves every page of docs/ as HTML, under a strict policy, with a validator and a cache lifetime', async () => {
    const urls = files.map(pageUrl);
    expect(urls).not.toContain(undefined);
    expect(urls).toContain('/docs/guides');
    expect(urls).toContain('/docs/problems');
    expect(urls).toContain('/docs/guides/vocabulary');
    expect(urls).toContain('/docs/guides/design');
    for (const url of urls as string[]) {
      const answer = await get(url);
      expect(answer.statusCode, url).toBe(200);
      expect(answer.headers['content-type']).toBe('text/html; charset=utf-8');
      expect(answer.headers['cache-control']).toBe('public, max-age=300');
      expect(answer.headers['x-content-type-options']).toBe('nosniff');
      const policy = String(answer.headers['content-security-policy']);
      expect(policy).toContain("default-src 'none'");
      expect(policy).toMatch(/style-src 'sha256-[A-Za-z0-9+/]+=*'/);
      expect(policy).not.toMatch(/script-src|unsafe-inline|unsafe-eval/);
      expect(answer.headers.etag).toMatch(/^"[A-Za-z0-9_-]{32}"$/);
      expect(answer.body).toMatch(/^<!doctype html>/);
      expect(answer.body).not.toContain('<script');
    }
  });

  it('answers 304 to a revalidation that names the page', async () => {
    const first = await get('/docs/guides/vocabulary');
    const again = await get('/docs/guides/vocabulary', { 'if-none-match': String(first.headers.etag) });
    expect(again.statusCode).toBe(304);
    expect(again.body).toBe('');
    expect(again.headers.etag).toBe(first.headers.etag);
  });

  it("styles each page only with the style its policy's hash names", async () => {
    const answer = await get('/docs/guides');
    const style = /<style>([\s\S]*?)<\/style>/.exec(answer.body)?.[1] ?? '';
    const { createHash } = await import('node:crypto');
    const hash = createHash('sha256').update(style).digest('base64');
    expect(String(answer.headers['content-security-policy'])).toContain(`style-src 'sha256-${hash}'`);
  });

  it('links every page from the index, and every link between pages resolves, anchors included', async () => {
    const pages = new Map<string, string>();
    const queue = ['/docs/guides'];
    while (queue.length > 0) {
      const url = queue.shift()!;
      if (pages.has(url)) continue;
      const answer = await get(url);
      expect(answer.statusCode, `${url}, linked from a page`).toBe(200);
      pages.set(url, answer.body);
      for (const href of hrefs(answer.body)) {
        // A page of the service other than these (the API reference) is not followed.
        if (href.startsWith('/docs/guides') || href.startsWith('/docs/problems'))
          queue.push(href.split('#')[0]!);
      }
    }
    // Reachable from the index: every page.
    expect([...pages.keys()].sort()).toEqual((files.map(pageUrl) as string[]).sort());
    for (const [url, html] of pages) {
      for (const href of hrefs(html)) {
        expect(href, `a link of ${url}`).toMatch(/^(https?:\/\/|\/|#)/);
        if (/^https?:\/\//.test(href)) continue;
        const [target, fragment] = href.split('#', 2);
        if (target === '/docs' || target === '/v3/openapi.json') {
          expect((await get(target)).statusCode).toBe(200);
          continue;
        }
        const page = target === '' ? html : pages.get(target!);
        expect(page, `${href}, linked from ${url}`).toBeDefined();
        if (fragment !== undefined) expect(ids(page!), `${href}, linked from ${url}`).toContain(fragment);
      }
    }
  });

  it('has a page for every problem code, titled by its code, and the index of problems links each', async () => {
    const codes = ProblemCode.enum as string[];
    expect(codes.length).toBeGreaterThanOrEqual(18);
    const index = (await get('/docs/problems')).body;
    for (const code of codes) {
      // Where every problem document of the code points (its `type`).
      const url = problemTypeUrl(code as Code);
      expect(url).toBe(`/docs/problems/${code}`);
      const answer = await get(url);
      expect(answer.statusCode, `the page of ${code}`).toBe(200);
      expect(answer.body).toMatch(new RegExp(`<h1[^>]*><code>${code}</code>: \\d{3} `));
      expect(hrefs(index)).toContain(url);
    }
  });

  it('answers an unknown page with a 404 problem document that does not repeat the address', async () => {
    for (const url of [
      '/docs/guides/no-such-guide',
      '/docs/problems/no_such_code',
      '/docs/guides/README',
      '/docs/guides/vocabulary.md',
    ]) {
      const answer = await get(url);
      expect(answer.statusCode, url).toBe(404);
      expect(answer.headers['content-type']).toMatch(/^application\/problem\+json/);
      const problem = answer.json() as { code: string; detail: string };
      expect(problem.code).toBe('not_found');
      expect(problem.detail).not.toContain('no-such');
    }
  });

  it('keeps the API reference at /docs working beside them, and the index of the service names both', async () => {
    const reference = await get('/docs');
    expect([200, 302]).toContain(reference.statusCode);
    const page = reference.statusCode === 302 ? await get(String(reference.headers.location)) : reference;
    expect(page.statusCode).toBe(200);
    expect(page.headers['content-type']).toMatch(/^text\/html/);
    expect((await get('/docs/json')).statusCode).toBe(200);
    expect((await get('/')).json()).toMatchObject({
      documentation: '/docs',
      guides: '/docs/guides',
      problems: '/docs/problems',
    });
  });

  it('needs no decision id in any page a user reads, nor in the README (the design record keeps its own)', async () => {
    for (const file of files.filter((name) => name !== 'design.md')) {
      const html = (await get(pageUrl(file)!)).body;
      expect(readable(html), `docs/${file}`).not.toMatch(DECISION_ID);
    }
    const readme = await fs.readFile(path.join(ROOT, 'README.md'), 'utf8');
    expect(readme).not.toMatch(DECISION_ID);
  });

  it('links, from the README and every Markdown page, only files that exist', async () => {
    for (const file of ['README.md', ...files.map((name) => `docs/${name}`)]) {
      const markdown = await fs.readFile(path.join(ROOT, file), 'utf8');
      for (const link of markdownLinks(markdown)) {
        if (/^(https?:|mailto:|#|\/)/.test(link)) continue;
        const target = path.join(path.dirname(path.join(ROOT, file)), link.split('#')[0]!);
        await expect(fs.stat(target), `${link} in ${file}`).resolves.toBeDefined();
        // An anchor into a page must name one of its headings.
        const [, fragment] = link.split('#', 2);
        const url = pageUrl(path.relative(DOCS_DIR, target).split(path.sep).join('/'));
        if (fragment !== undefined && url !== undefined) {
          expect(ids((await get(url)).body), `${link} in ${file}`).toContain(fragment);
        }
      }
    }
  });
});

describe('rendering Markdown pages', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await fs.mkdtemp(path.join(os.tmpdir(), 'playbook-docs-'));
    await fs.mkdir(path.join(dir, 'guides'));
    await fs.mkdir(path.join(dir, 'problems'));
    await fs.writeFile(
      path.join(dir, 'README.md'),
      [
        '# Index <b>bold</b>',
        '',
        'See [a guide](guides/a-guide.md#second-part), [a code](problems/some_code.md),',
        '[the readme](../README.md), [elsewhere](https://example.com/x) and',
        '[a script](javascript:alert(1)).',
        '',
        '<script>alert(1)</script>',
        '',
        '<img src=x onerror=alert(1)>',
      ].join('\n'),
    );
    await fs.writeFile(
      path.join(dir, 'guides', 'a-guide.md'),
      '# A guide\n\n## Second part\n\n## Second part\n',
    );
    await fs.writeFile(path.join(dir, 'problems', 'some_code.md'), '# `some_code`: 400 Bad Request\n');
    await fs.writeFile(path.join(dir, 'problems', 'README.md'), '# Codes\n');
  });
  afterAll(async () => {
    await fs.rm(dir, { recursive: true, force: true });
  });

  it('shows HTML written in the Markdown as text, and turns links between files into links between pages', async () => {
    const site = await renderDocs(dir);
    expect([...site.pages.keys()].sort()).toEqual([
      '/docs/guides',
      '/docs/guides/a-guide',
      '/docs/problems',
      '/docs/problems/some_code',
    ]);
    const index = site.pages.get('/docs/guides')!;
    expect(index.title).toBe('Index <b>bold</b>');
    expect(index.html).toContain('<title>Index &lt;b&gt;bold&lt;/b&gt; · Playbook</title>');
    expect(index.html).not.toContain('<script>');
    expect(index.html).not.toContain('<img');
    expect(index.html).not.toContain('<b>');
    expect(index.html).toContain('&lt;script&gt;alert(1)&lt;/script&gt;');
    expect(index.html).toContain('<a href="/docs/guides/a-guide#second-part">a guide</a>');
    expect(index.html).toContain('<a href="/docs/problems/some_code">a code</a>');
    expect(index.html).toContain('<a href="https://example.com/x">elsewhere</a>');
    // A file of the repository that is not served keeps its text and loses its target; a script
    // address is never a link.
    expect(index.html).toContain('the readme');
    expect(hrefs(index.html)).toEqual([
      '/docs/guides',
      '/docs/problems',
      '/docs',
      '/docs/guides/a-guide#second-part',
      '/docs/problems/some_code',
      'https://example.com/x',
    ]);
  });

  it('gives headings the anchors a repository browser gives them, unique within a page', async () => {
    const site = await renderDocs(dir);
    const guide = site.pages.get('/docs/guides/a-guide')!.html;
    expect(guide).toContain('<h1 id="a-guide">A guide</h1>');
    expect(guide).toContain('<h2 id="second-part">Second part</h2>');
    expect(guide).toContain('<h2 id="second-part-1">Second part</h2>');
    expect(site.pages.get('/docs/problems/some_code')!.title).toBe('some_code: 400 Bad Request');
  });

  it('refuses two files that would be served at one address', async () => {
    await fs.writeFile(path.join(dir, 'a-guide.md'), '# Another\n');
    await expect(renderDocs(dir)).rejects.toThrow(/would both be served at \/docs\/guides\/a-guide/);
    await fs.rm(path.join(dir, 'a-guide.md'));
  });
});
