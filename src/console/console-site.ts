import { createHash } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { PROJECT_ROOT } from '../foundation/project-root.js';

/**
 * The console of D33 as the service serves it at `/console`: the files `npm run build` makes in
 * `console/dist` (Vite), read once at start. The page is the same for every route of the console;
 * only the settings it needs differ by deployment, and they reach it in one `<meta>` element the
 * service fills in, never in a script.
 */

/** Where `npm run build` writes the console. */
export const CONSOLE_DIST = path.join(PROJECT_ROOT, 'console', 'dist');

/** Where the console is served; its assets are under `${CONSOLE_PATH}/assets/`. */
export const CONSOLE_PATH = '/console';

/** The element the page reads its settings from, as the build leaves it: empty, for the service to fill. */
export const SETTINGS_PLACEHOLDER = '<meta name="playbook-console" content="">';

/** What the page needs to know of its deployment. */
export interface ConsoleSettings {
  /** The identity provider, when people sign in with OpenID Connect. */
  readonly oidc?: { readonly issuer: string; readonly clientId: string };
  /** Whether the "Sign in for development" form is offered: a test deployment with the embedded signer. */
  readonly devSignIn: boolean;
}

/** One file the console is made of. */
export interface ConsoleFile {
  readonly body: Buffer;
  /** Its media type, with the charset of text. */
  readonly type: string;
  /** Its strong validator. */
  readonly tag: string;
}

export interface ConsoleSite {
  /** The page every route of the console answers with, its settings filled in. */
  readonly page: ConsoleFile;
  /** The page the identity provider sends a sign-in back to (`/console/callback`). */
  readonly callback: ConsoleFile;
  /** Scripts, styles and images, by name under `assets/`: names that hold their content's hash. */
  readonly assets: ReadonlyMap<string, ConsoleFile>;
  /** The policy of the page: the console's own files, the API, and the identity provider. */
  readonly contentSecurityPolicy: string;
  /** The policy of the callback page, which the page may frame for a sign-in without a prompt. */
  readonly callbackSecurityPolicy: string;
}

const TYPES: Readonly<Record<string, string>> = {
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.woff2': 'font/woff2',
  '.map': 'application/json; charset=utf-8',
};

const HTML = 'text/html; charset=utf-8';

function fileOf(body: Buffer, type: string): ConsoleFile {
  return { body, type, tag: createHash('sha256').update(body).digest('base64url').slice(0, 32) };
}

const escapeAttribute = (text: string) =>
  text.replaceAll('&', '&amp;').replaceAll('"', '&quot;').replaceAll('<', '&lt;').replaceAll('>', '&gt;');

/** The page with its settings in the `<meta>` element, as JSON in an attribute: data, never script. */
export function withSettings(html: string, settings: ConsoleSettings): string {
  const at = html.indexOf(SETTINGS_PLACEHOLDER);
  if (at === -1 || html.indexOf(SETTINGS_PLACEHOLDER, at + 1) !== -1) {
    throw new Error(`the console's page must hold ${SETTINGS_PLACEHOLDER} once`);
  }
  const filled = `<meta name="playbook-console" content="${escapeAttribute(JSON.stringify(settings))}">`;
  return html.slice(0, at) + filled + html.slice(at + SETTINGS_PLACEHOLDER.length);
}

/**
 * D33's policy: scripts, styles and images of the console's own origin only (no inline script, no
 * `eval`), requests to the API of the same origin and to the identity provider, which may also be
 * framed for a sign-in without a prompt, with the callback page it sends the answer to; nothing may
 * frame the console.
 */
export function consoleSecurityPolicy(settings: ConsoleSettings, frameAncestors: string): string {
  const provider = settings.oidc ? new URL(settings.oidc.issuer).origin : undefined;
  const withProvider = (own: string) => (provider ? `${own} ${provider}` : own);
  return [
    "default-src 'none'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self' data:",
    "font-src 'self'",
    withProvider("connect-src 'self'"),
    // The provider's page, framed hidden for a sign-in without a prompt, sends it back to the callback.
    provider ? `frame-src 'self' ${provider}` : "frame-src 'none'",
    "form-action 'self'",
    "base-uri 'none'",
    "object-src 'none'",
    `frame-ancestors ${frameAncestors}`,
  ].join('; ');
}

/**
 * Reads the built console from `dir`. Undefined when it has not been built (`npm run build` makes it),
 * so that a service started from a checkout without it serves the API and says so.
 */
export async function loadConsole(
  settings: ConsoleSettings,
  dir: string = CONSOLE_DIST,
): Promise<ConsoleSite | undefined> {
  let html: string;
  try {
    html = await fs.readFile(path.join(dir, 'index.html'), 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw error;
  }
  const callback = await fs.readFile(path.join(dir, 'callback.html'));
  const assets = new Map<string, ConsoleFile>();
  for (const name of await fs.readdir(path.join(dir, 'assets'))) {
    const type = TYPES[path.extname(name)];
    // Source maps and whatever else the build leaves beside the assets are not served.
    if (type === undefined || name.endsWith('.map')) continue;
    assets.set(name, fileOf(await fs.readFile(path.join(dir, 'assets', name)), type));
  }
  return {
    page: fileOf(Buffer.from(withSettings(html, settings)), HTML),
    callback: fileOf(callback, HTML),
    assets,
    contentSecurityPolicy: consoleSecurityPolicy(settings, "'none'"),
    callbackSecurityPolicy: consoleSecurityPolicy(settings, "'self'"),
  };
}
