import { existsSync } from 'node:fs';
import fs from 'node:fs/promises';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { type Browser, chromium, type Locator, type Page } from 'playwright-core';
import { npmStart, ROOT, type Started } from './npm-start.js';
import { waitFor } from './wait.js';
import { TEST_WEBHOOK_ENV } from './webhooks.js';

/** Debian's Chromium: CI installs it (`.ci/run`); a missing one fails the console's tests, never skips them. */
export const CHROMIUM = '/usr/bin/chromium';

/** Where the screenshots of each page go when `UPDATE_SCREENSHOTS=1`; the README links to them. */
export const SCREENSHOTS = path.join(ROOT, 'docs', 'console');

/**
 * Chromium for the console's tests: a fresh profile (playwright-core's own), and nothing that reaches
 * beyond this machine (no sync, updates or background requests), which a closed network refuses.
 */
export async function launchChromium(extraArgs: readonly string[] = []): Promise<Browser> {
  if (!existsSync(CHROMIUM)) {
    throw new Error(`${CHROMIUM} is missing: install Debian's chromium package (.ci/run does)`);
  }
  return chromium.launch({
    executablePath: CHROMIUM,
    args: [
      ...(process.getuid?.() === 0 ? ['--no-sandbox'] : []),
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      ...extraArgs,
    ],
  });
}

export interface ConsoleService {
  /** The API's address, `http://127.0.0.1:<port>`. */
  readonly address: string;
  /** The console's address, `<address>/console`. */
  readonly console: string;
  readonly started: Started;
  stop(): Promise<void>;
}

/**
 * The service as `npm start` runs it (the built service and console, no build first), on a data
 * directory of its own: webhooks may go to a receiver on 127.0.0.1, limits are generous.
 */
export async function startConsoleService(env: Record<string, string> = {}): Promise<ConsoleService> {
  if (!existsSync(path.join(ROOT, 'console', 'dist', 'index.html'))) {
    throw new Error('the console is not built: run npm run build first');
  }
  const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'playbook-console-browser-'));
  const started = await npmStart(
    dataDir,
    { ...TEST_WEBHOOK_ENV, ...env },
    { ownGroup: true, skipBuild: true },
  );
  await waitFor('the console in the banner', () =>
    started.stderr().includes(`Console: ${started.address}/console`),
  );
  return {
    address: started.address,
    console: `${started.address}/console`,
    started,
    stop: async () => {
      try {
        process.kill(-started.child.pid!, 'SIGINT');
        await started.exited;
      } catch {
        // Already gone.
      }
      await fs.rm(dataDir, { recursive: true, force: true });
    },
  };
}

const axeSource = (() => {
  const require = createRequire(import.meta.url);
  return fs.readFile(require.resolve('axe-core/axe.min.js'), 'utf8');
})();

interface AxeViolation {
  readonly id: string;
  readonly impact: string | null;
  readonly help: string;
  readonly nodes: readonly { readonly target: readonly unknown[] }[];
}

/**
 * The serious and critical violations axe-core finds on the page as it is (WCAG 2.2 AA rules). The
 * script is evaluated through the browser's debugging protocol, which the page's
 * Content-Security-Policy does not govern: the page itself runs only its own files.
 */
export async function seriousViolations(page: Page): Promise<string[]> {
  await page.evaluate(await axeSource);
  const result = (await page.evaluate(`axe.run({
    runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'wcag22aa', 'best-practice'] },
  })`)) as { violations: AxeViolation[]; passes: unknown[] };
  // A run that checked nothing would find nothing: the page had not rendered, or axe did not run.
  if (result.passes.length === 0) throw new Error(`axe-core checked nothing on ${page.url()}`);
  const { violations } = result;
  return violations
    .filter((violation) => violation.impact === 'serious' || violation.impact === 'critical')
    .map(
      (violation) =>
        `${violation.id} (${violation.impact}): ${violation.help} at ${violation.nodes.map((node) => JSON.stringify(node.target)).join(', ')}`,
    );
}

/** What the page keeps where a script (or another tab) could read it again: D33 says nothing. */
export async function storedByThePage(page: Page): Promise<{
  localStorage: number;
  sessionStorage: number;
  indexedDb: string[];
  cookie: string;
}> {
  // An expression, not a function: the suite is typed for Node, without the DOM's names.
  return page.evaluate(`(async () => ({
    localStorage: localStorage.length,
    sessionStorage: sessionStorage.length,
    indexedDb: (await indexedDB.databases()).map((database) => database.name ?? ''),
    cookie: document.cookie,
  }))()`);
}

/** Whether the element has the keyboard's focus. */
export function focused(locator: Locator): Promise<boolean> {
  return locator.evaluate(
    (element) =>
      element ===
      (element as unknown as { ownerDocument: { activeElement: unknown } }).ownerDocument.activeElement,
  );
}

/** Whether markup the test put in a name ran as script in the page (`window.__injected`). */
export async function scriptInjected(page: Page): Promise<boolean> {
  return (await page.evaluate('window.__injected')) !== undefined;
}

/** Writes the page's screenshot into docs/console when `UPDATE_SCREENSHOTS=1`. */
export async function screenshot(page: Page, name: string): Promise<void> {
  if (process.env.UPDATE_SCREENSHOTS !== '1') return;
  await fs.mkdir(SCREENSHOTS, { recursive: true });
  await page.screenshot({ path: path.join(SCREENSHOTS, `${name}.png`), fullPage: true });
}

/** Signs in with the "Sign in for development" form, then waits for the first page of the console. */
export async function signInForDevelopment(page: Page, user: string, accounts: string): Promise<void> {
  await page.getByLabel('User').fill(user);
  await page.getByLabel('Account', { exact: true }).fill(accounts);
  await page.getByRole('button', { name: 'Sign in', exact: true }).click();
  await page.getByRole('button', { name: 'Sign out' }).waitFor();
}
