import type { Browser, BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type ConsoleService,
  launchChromium,
  screenshot,
  seriousViolations,
  startConsoleService,
  storedByThePage,
} from '../helpers/console-browser.js';
import { type IdentityProvider, startIdentityProvider } from '../helpers/oidc-provider.js';
import { freePort } from '../helpers/servers.js';
import { waitFor } from '../helpers/wait.js';

/** How long the provider's access tokens live here: short, so that the test sees one run out. */
const TOKEN_TTL_S = 4;

/**
 * The console signing in with a real OpenID provider (D33): authorization code with PKCE in a window
 * of its own, the page asked for kept, a token that runs out renewed without a prompt, and a reload
 * signed in again without one. The deployment verifies the provider's tokens (no development signer,
 * so no development form).
 */
describe('the console, signed in with an OpenID provider (D33)', () => {
  let idp: IdentityProvider;
  let service: ConsoleService;
  let browser: Browser;
  let context: BrowserContext;
  let page: Page;

  beforeAll(async () => {
    const port = await freePort();
    idp = await startIdentityProvider({
      consoleOrigin: `http://127.0.0.1:${port}`,
      accounts: () => ['acme'],
      accessTokenTtlS: TOKEN_TTL_S,
    });
    [service, browser] = await Promise.all([
      startConsoleService({ ...idp.serviceEnv, PORT: String(port) }),
      launchChromium(),
    ]);
    context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    page = await context.newPage();
  }, 120_000);

  afterAll(async () => {
    await context?.close();
    await browser?.close();
    await service?.stop();
    await idp?.close();
  });

  const providerButton = () => page.getByRole('button', { name: `Sign in with ${new URL(idp.issuer).host}` });

  it('offers the provider and no development form', async () => {
    await page.goto(`${service.console}/audit`);
    await providerButton().waitFor();
    await expect(page.getByText('Sign in for development').count()).resolves.toBe(0);
    expect(await seriousViolations(page)).toEqual([]);
    await screenshot(page, 'sign-in-oidc');
  });

  /** Signs in at the provider's own pages, in the window the console opens, which then closes. */
  const signInAtProvider = async () => {
    const popupOpened = page.waitForEvent('popup');
    await providerButton().click();
    const popup = await popupOpened;
    const closed = popup.waitForEvent('close');
    await popup.locator('input[name="login"]').fill('ada');
    await popup.locator('input[name="password"]').fill('any password');
    await popup.getByRole('button', { name: 'Sign-in' }).click();
    await popup.getByRole('button', { name: 'Continue' }).click();
    await closed;
  };

  it('signs in with the authorization code flow and PKCE, on the page that was asked for', async () => {
    await signInAtProvider();
    await page.getByRole('heading', { level: 1, name: 'Audit log' }).waitFor();
    expect(new URL(page.url()).pathname).toBe('/console/audit');
    await expect(page.locator('.user').textContent()).resolves.toBe('ada');
    expect(idp.issued()).toBe(1);
    expect(await storedByThePage(page)).toEqual({
      localStorage: 0,
      sessionStorage: 0,
      indexedDb: [],
      cookie: '',
    });
  });

  it('renews a token that runs out without a prompt, and the page stays', async () => {
    await waitFor('a renewed token', () => idp.issued() >= 2, 20_000);
    await page.getByRole('link', { name: 'Keys' }).click();
    await page.getByRole('heading', { level: 1, name: 'API keys' }).waitFor();
    await page.getByText('This account has no keys yet').waitFor();
    await expect(page.getByRole('button', { name: 'Sign out' }).count()).resolves.toBe(1);
  });

  it('asks for a sign-in when a token runs out and the provider wants the user, then shows the same page', async () => {
    // The provider forgets the user (its session cookie goes): the next renewal needs a prompt.
    await context.clearCookies();
    await page.getByText('Your session has ended. Sign in again to go on where you were.').waitFor();
    expect(new URL(page.url()).pathname).toBe('/console/keys');
    await signInAtProvider();
    await page.getByRole('heading', { level: 1, name: 'API keys' }).waitFor();
    expect(new URL(page.url()).pathname).toBe('/console/keys');
  });

  it('signs in again without a prompt after a reload, and nothing was kept by the page', async () => {
    const before = idp.issued();
    await page.reload();
    await page.getByRole('heading', { level: 1, name: 'API keys' }).waitFor();
    expect(idp.issued()).toBeGreaterThan(before);
    expect(await storedByThePage(page)).toEqual({
      localStorage: 0,
      sessionStorage: 0,
      indexedDb: [],
      cookie: '',
    });
  });

  it('signs out', async () => {
    await page.getByRole('button', { name: 'Sign out' }).click();
    await providerButton().waitFor();
  });
});
