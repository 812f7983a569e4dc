import fs from 'node:fs/promises';
import path from 'node:path';
import { gzipSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { CONSOLE_DIST } from '../../src/console/console-site.js';

/** D33's budget for the JavaScript the first page loads, compressed. */
const INITIAL_JS_BUDGET_BYTES = 150 * 1024;

/** The scripts a page loads before it runs: its module scripts and what they preload. */
function initialScripts(html: string): string[] {
  const scripts = [...html.matchAll(/<script[^>]*\ssrc="([^"]+)"/g)].map((match) => match[1]!);
  const preloads = [...html.matchAll(/<link[^>]*rel="modulepreload"[^>]*href="([^"]+)"/g)].map(
    (match) => match[1]!,
  );
  return [...scripts, ...preloads];
}

/** A script's size as the network carries it: gzip, which every browser takes (brotli is smaller). */
async function compressedSize(url: string): Promise<number> {
  expect(url).toMatch(/^\/console\/assets\//);
  const file = path.join(CONSOLE_DIST, url.slice('/console/'.length));
  return gzipSync(await fs.readFile(file), { level: 9 }).length;
}

describe('the built console (D33)', () => {
  it('loads at most 150 KB of compressed JavaScript on its first page', async () => {
    const html = await fs.readFile(path.join(CONSOLE_DIST, 'index.html'), 'utf8');
    const scripts = initialScripts(html);
    expect(scripts.length).toBeGreaterThan(0);
    const sizes = await Promise.all(scripts.map(compressedSize));
    const total = sizes.reduce((sum, size) => sum + size, 0);
    console.info(`the console's first page loads ${(total / 1024).toFixed(1)} KB of compressed JavaScript`);
    expect(total).toBeLessThanOrEqual(INITIAL_JS_BUDGET_BYTES);
  });

  it('names every asset by its content hash, so that it may be cached for a year', async () => {
    const names = await fs.readdir(path.join(CONSOLE_DIST, 'assets'));
    expect(names.length).toBeGreaterThan(0);
    for (const name of names) expect(name).toMatch(/-[\w-]{8,}\.(js|css)$/);
  });

  it('holds no inline script and no inline style in its pages', async () => {
    for (const page of ['index.html', 'callback.html']) {
      const html = await fs.readFile(path.join(CONSOLE_DIST, page), 'utf8');
      expect(html).not.toMatch(/<script(?![^>]*\ssrc=)[^>]*>/);
      expect(html).not.toMatch(/<style|\sstyle="/);
    }
  });
});
