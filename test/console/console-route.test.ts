import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { brotliDecompressSync } from 'node:zlib';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../../src/composition/app.js';
import { loadConsole, SETTINGS_PLACEHOLDER, withSettings } from '../../src/console/console-site.js';
import { unlimited } from '../helpers/app.js';

/** A console as `vite build` leaves one: the two pages and hashed assets. */
async function builtConsole(dir: string): Promise<void> {
  await fs.mkdir(path.join(dir, 'assets'), { recursive: true });
  const page = (script: string) =>
    `<!doctype html><html><head>${SETTINGS_PLACEHOLDER}<script type="module" src="/console/assets/${script}"></script></head><body></body></html>`;
  await fs.writeFile(path.join(dir, 'index.html'), page('index-Ab12.js'));
  await fs.writeFile(
    path.join(dir, 'callback.html'),
    page('callback-Cd34.js').replace(SETTINGS_PLACEHOLDER, ''),
  );
  await fs.writeFile(
    path.join(dir, 'assets', 'index-Ab12.js'),
    `console.log(${JSON.stringify('x'.repeat(4000))});`,
  );
  await fs.writeFile(path.join(dir, 'assets', 'callback-Cd34.js'), 'void 0;');
  await fs.writeFile(path.join(dir, 'assets', 'index-Ef56.css'), 'body{margin:0}');
  await fs.writeFile(path.join(dir, 'assets', 'index-Ab12.js.map'), '{}');
}

const noAuthenticator = {
  authenticate: async () => {
    throw new Error('the console takes no credential');
  },
};

describe('the console at /console (D33)', () => {
  let dir: string;
  let app: FastifyInstance;

  beforeAll(async () => {
    dir = await fs.mkdtemp(path.join(os.tmpdir(), 'playbook-console-'));
    await builtConsole(dir);
    const site = await loadConsole(
      { oidc: { issuer: 'https://id.example.test/realms/a', clientId: 'console' }, devSignIn: true },
      dir,
    );
    app = await buildApp({
      reads: undefined as never,
      authenticator: noAuthenticator as never,
      rateLimits: unlimited,
      readiness: [],
      console: site!,
    });
  });
  afterAll(async () => {
    await app?.close();
    await fs.rm(dir, { recursive: true, force: true });
  });

  it('answers every route of the console with the page, its settings in the meta element, never cached unchecked', async () => {
    for (const url of ['/console', '/console/', '/console/keys', '/console/catalogs/svc/handbook']) {
      const response = await app.inject({ url, headers: { accept: 'text/html' } });
      expect(response.statusCode, url).toBe(200);
      expect(response.headers['content-type']).toBe('text/html; charset=utf-8');
      expect(response.headers['cache-control']).toBe('no-cache');
      expect(response.body).toContain(
        '<meta name="playbook-console" content="{&quot;oidc&quot;:{&quot;issuer&quot;:&quot;https://id.example.test/realms/a&quot;,&quot;clientId&quot;:&quot;console&quot;},&quot;devSignIn&quot;:true}">',
      );
      expect(response.body).not.toMatch(/<script>/);
    }
  });

  it('sends the strict Content-Security-Policy: own scripts only, the API and the identity provider, framed by no one', async () => {
    const response = await app.inject({ url: '/console/keys' });
    const policy = response.headers['content-security-policy'] as string;
    expect(policy.split('; ')).toEqual(
      expect.arrayContaining([
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "connect-src 'self' https://id.example.test",
        "frame-src 'self' https://id.example.test",
        "frame-ancestors 'none'",
        "base-uri 'none'",
        "object-src 'none'",
      ]),
    );
    expect(policy).not.toMatch(/unsafe-inline|unsafe-eval/);
    expect(response.headers['x-content-type-options']).toBe('nosniff');
    expect(response.headers['referrer-policy']).toBe('no-referrer');
    expect(response.headers['x-request-id']).toBeDefined();
  });

  it("serves the identity provider's return page, which the console alone may frame", async () => {
    const response = await app.inject({ url: '/console/callback?code=abc&state=xyz' });
    expect(response.statusCode).toBe(200);
    expect(response.body).toContain('callback-Cd34.js');
    expect(response.headers['content-security-policy']).toContain("frame-ancestors 'self'");
    expect(response.headers['cache-control']).toBe('no-cache');
  });

  it('serves hashed assets for a year, immutable, compressed when asked, and revalidated by ETag', async () => {
    const response = await app.inject({
      url: '/console/assets/index-Ab12.js',
      headers: { 'accept-encoding': 'br' },
    });
    expect(response.statusCode).toBe(200);
    expect(response.headers['cache-control']).toBe('public, max-age=31536000, immutable');
    expect(response.headers['content-type']).toBe('text/javascript; charset=utf-8');
    expect(response.headers['content-encoding']).toBe('br');
    expect(response.headers.vary).toBe('accept-encoding');
    expect(brotliDecompressSync(response.rawPayload).toString()).toContain('console.log(');
    const again = await app.inject({
      url: '/console/assets/index-Ab12.js',
      headers: { 'accept-encoding': 'br', 'if-none-match': response.headers.etag as string },
    });
    expect(again.statusCode).toBe(304);
    const css = await app.inject({ url: '/console/assets/index-Ef56.css' });
    expect(css.headers['content-type']).toBe('text/css; charset=utf-8');
    expect(css.headers['content-encoding']).toBeUndefined();
  });

  it('answers 404 with a problem document for an asset it does not have, source maps included', async () => {
    for (const url of ['/console/assets/index-Zz99.js', '/console/assets/index-Ab12.js.map']) {
      const response = await app.inject({ url });
      expect(response.statusCode, url).toBe(404);
      expect(response.headers['content-type']).toMatch(/^application\/problem\+json/);
    }
  });

  it('answers HEAD as GET, without a body', async () => {
    const response = await app.inject({ method: 'HEAD', url: '/console/audit' });
    expect(response.statusCode).toBe(200);
    expect(response.body).toBe('');
    expect(response.headers.etag).toBeDefined();
  });

  it('is not in the API document', async () => {
    const document = (await app.inject({ url: '/v3/openapi.json' })).json();
    expect(Object.keys(document.paths).filter((route) => route.startsWith('/console'))).toEqual([]);
  });
});

describe('loading the console (D33)', () => {
  it('is nothing when it has not been built, so that the service serves the API and says so', async () => {
    expect(
      await loadConsole({ devSignIn: false }, path.join(os.tmpdir(), 'no-such-console-build')),
    ).toBeUndefined();
  });

  it('writes the settings as data in the element, escaped, and only where the build left the element once', () => {
    const html = `<head>${SETTINGS_PLACEHOLDER}</head>`;
    const filled = withSettings(html, {
      oidc: { issuer: 'https://id.example/"><script>', clientId: 'c' },
      devSignIn: false,
    });
    expect(filled).not.toContain('<script>');
    expect(filled).toContain('&quot;&gt;&lt;script&gt;');
    expect(() => withSettings('<head></head>', { devSignIn: false })).toThrow(/must hold/);
    expect(() => withSettings(html + html, { devSignIn: false })).toThrow(/must hold/);
  });
});
