import { createHash } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import GithubSlugger from 'github-slugger';
import markdownIt, { type MarkdownIt, type StateCore, type Token } from 'markdown-it';
import { PROJECT_ROOT } from '../foundation/project-root.js';
import { PROBLEM_DOCS_PATH } from '../schemas/common.js';

/**
 * The pages of `docs/` as the service serves them under `/docs` (D29): the guides, the vocabulary,
 * operations and the design record at `/docs/guides/<name>`, one page per problem code at
 * `/docs/problems/<code>` (where every problem document's `type` points), and an index of each.
 * Rendered once, from the files of this checkout: the same text a reader finds in the repository.
 */

/** The folder the pages are made from. */
export const DOCS_DIR = path.join(PROJECT_ROOT, 'docs');

export interface DocsPage {
  /** Where the service serves it, e.g. `/docs/problems/not_found`. */
  readonly url: string;
  /** The file it is made from, relative to the project folder, e.g. `docs/problems/not_found.md`. */
  readonly source: string;
  /** The text of its first heading. */
  readonly title: string;
  /** The whole HTML document. */
  readonly html: string;
  /** Its strong validator. */
  readonly etag: string;
}

export interface DocsSite {
  /** Every page by its URL. */
  readonly pages: ReadonlyMap<string, DocsPage>;
  /** The `Content-Security-Policy` the pages need: nothing but their own inline style. */
  readonly contentSecurityPolicy: string;
}

const GUIDES = '/docs/guides';
/** Where a problem document's `type` points (problemTypeUrl): one page per code there. */
const PROBLEMS = PROBLEM_DOCS_PATH;

/**
 * Where a file of `docs/` is served, or undefined when it is not a page. Each folder's README is its
 * index, as a repository browser shows it.
 */
export function pageUrl(relative: string): string | undefined {
  const parts = relative.split('/');
  const name = parts.at(-1)?.replace(/\.md$/, '');
  if (name === undefined || !relative.endsWith('.md') || !/^[a-z0-9_-]+$/i.test(name)) return undefined;
  if (parts.length === 1) return name === 'README' ? GUIDES : `${GUIDES}/${name}`;
  if (parts.length !== 2) return undefined;
  if (parts[0] === 'guides') return name === 'README' ? GUIDES : `${GUIDES}/${name}`;
  if (parts[0] === 'problems') return name === 'README' ? PROBLEMS : `${PROBLEMS}/${name}`;
  return undefined;
}

const STYLE = [
  'body{margin:0;font:16px/1.55 system-ui,-apple-system,"Segoe UI",sans-serif;color:#1f2328;background:#fff}',
  'nav{padding:.6rem 1.5rem;border-bottom:1px solid #d1d9e0;background:#f6f8fa}',
  'nav a{margin-right:1.2rem}',
  'main{max-width:52rem;padding:1rem 1.5rem 3rem;margin:0 auto}',
  'a{color:#0969da}',
  'code,pre{font:.88em ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}',
  'code{background:#eff1f3;padding:.1em .3em;border-radius:4px}',
  'pre{background:#f6f8fa;padding:.8rem 1rem;overflow:auto;border-radius:6px}',
  'pre code{background:none;padding:0}',
  'table{border-collapse:collapse;display:block;overflow:auto}',
  'th,td{border:1px solid #d1d9e0;padding:.35rem .6rem;text-align:left;vertical-align:top}',
  'h1,h2,h3{line-height:1.25}',
  'h2{margin-top:2rem;padding-bottom:.3rem;border-bottom:1px solid #d1d9e0}',
].join('');

const STYLE_HASH = createHash('sha256').update(STYLE).digest('base64');

/**
 * A strict policy: no script, no frame, no form; styles only the page's own, by hash. The pages hold
 * nothing of a user's, but a policy that allows nothing more than they need costs nothing.
 */
const CONTENT_SECURITY_POLICY = [
  "default-src 'none'",
  `style-src 'sha256-${STYLE_HASH}'`,
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

const escapeHtml = (text: string) =>
  text.replaceAll('&', '&amp;').replaceAll('<', '&lt;').replaceAll('>', '&gt;').replaceAll('"', '&quot;');

/** What the link rules need to know of the page being rendered. */
type RenderEnv = {
  /** The file, relative to the project folder. */
  readonly source: string;
  /** Every page's URL by its file. */
  readonly urls: ReadonlyMap<string, string>;
};

/** The text of an inline token, as GitHub makes a heading's anchor of it: text and code, no markup. */
function plainText(token: Token): string {
  return (token.children ?? [])
    .filter((child) => child.type === 'text' || child.type === 'code_inline')
    .map((child) => child.content)
    .join('');
}

/** Each heading gets the id GitHub gives it, so that `page.md#a-heading` links hold in both places. */
function headingIds(state: StateCore): void {
  const slugger = new GithubSlugger();
  state.tokens.forEach((token, index) => {
    if (token.type !== 'heading_open') return;
    const inline = state.tokens[index + 1];
    if (inline) token.attrSet('id', slugger.slug(plainText(inline)));
  });
}

/**
 * Links between files become links between pages: `../problems/not_found.md#when` is
 * `/docs/problems/not_found#when`. A link to a file of the repository that is not served (the README,
 * an example) keeps its text and loses its target.
 */
function pageLinks(state: StateCore): void {
  const env = state.env as unknown as RenderEnv;
  for (const block of state.tokens) {
    const open: Token[] = [];
    for (const token of block.children ?? []) {
      if (token.type === 'link_open') {
        open.push(token);
        const href = token.attrGet('href');
        if (typeof href !== 'string' || /^[a-z][a-z0-9+.-]*:|^\/|^#/i.test(href)) continue;
        const [file = '', fragment] = href.split('#', 2);
        const target = path.posix.normalize(path.posix.join(path.posix.dirname(env.source), file));
        const url = env.urls.get(target);
        if (url === undefined) token.meta = { unserved: true };
        else token.attrSet('href', fragment === undefined ? url : `${url}#${fragment}`);
      } else if (token.type === 'link_close') {
        token.meta = open.pop()?.meta ?? null;
      }
    }
  }
}

function markdown(): MarkdownIt {
  // No HTML passes through: any tag in a page is shown as text.
  const md = markdownIt({ html: false, linkify: false, typographer: false });
  md.core.ruler.push('heading_ids', headingIds);
  md.core.ruler.push('page_links', pageLinks);
  const renderToken = md.renderer.renderToken.bind(md.renderer);
  const unserved = (token: Token | undefined) => (token?.meta as { unserved?: boolean } | null)?.unserved;
  md.renderer.rules.link_open = (tokens, index, options) =>
    unserved(tokens[index]) ? '' : renderToken(tokens, index, options);
  md.renderer.rules.link_close = (tokens, index, options) =>
    unserved(tokens[index]) ? '' : renderToken(tokens, index, options);
  return md;
}

function document(title: string, body: string): string {
  return [
    '<!doctype html>',
    '<html lang="en">',
    '<head>',
    '<meta charset="utf-8">',
    '<meta name="viewport" content="width=device-width, initial-scale=1">',
    `<title>${escapeHtml(title)} · Playbook</title>`,
    `<style>${STYLE}</style>`,
    '</head>',
    '<body>',
    `<nav><a href="${GUIDES}">Guides</a><a href="${PROBLEMS}">Problems</a><a href="/docs">API reference</a></nav>`,
    `<main>\n${body}</main>`,
    '</body>',
    '</html>',
    '',
  ].join('\n');
}

/** Every Markdown file under `dir`, relative to it, with `/` between folders. */
async function markdownFiles(dir: string): Promise<string[]> {
  const entries = await fs.readdir(dir, { recursive: true, withFileTypes: true });
  return entries
    .filter((entry) => entry.isFile() && entry.name.endsWith('.md'))
    .map((entry) => path.relative(dir, path.join(entry.parentPath, entry.name)).split(path.sep).join('/'))
    .sort();
}

/**
 * Reads and renders every page of `dir` (by default this checkout's `docs/`).
 *
 * @example
 * const site = await renderDocs();
 * site.pages.get('/docs/problems/not_found')?.html;
 */
export async function renderDocs(dir: string = DOCS_DIR): Promise<DocsSite> {
  const files = await markdownFiles(dir);
  const root = path.relative(PROJECT_ROOT, dir).split(path.sep).join('/');
  const urls = new Map<string, string>();
  for (const file of files) {
    const url = pageUrl(file);
    if (url === undefined) continue;
    const source = path.posix.join(root, file);
    const taken = [...urls].find(([, other]) => other === url);
    if (taken) throw new Error(`${source} and ${taken[0]} would both be served at ${url}`);
    urls.set(source, url);
  }
  const md = markdown();
  const pages = new Map<string, DocsPage>();
  for (const [source, url] of urls) {
    const text = await fs.readFile(path.join(PROJECT_ROOT, source), 'utf8');
    const env: RenderEnv = { source, urls };
    const tokens: Token[] = md.parse(text, env);
    const heading = tokens.findIndex((token) => token.type === 'heading_open' && token.tag === 'h1');
    const title = heading >= 0 && tokens[heading + 1] ? plainText(tokens[heading + 1]!) : url;
    const html = document(title, md.renderer.render(tokens, md.options, env));
    const etag = `"${createHash('sha256').update(html).digest('base64url').slice(0, 32)}"`;
    pages.set(url, { url, source, title, html, etag });
  }
  return { pages, contentSecurityPolicy: CONTENT_SECURITY_POLICY };
}
