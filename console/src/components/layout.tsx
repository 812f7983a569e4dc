import type { ComponentChildren } from 'preact';
import { paths, type Route } from '../router';
import { type SignedIn, signOut, switchAccount } from '../session';
import { Link } from './link';

const SECTIONS = [
  { name: 'Keys', href: paths.keys(), pages: ['keys'] },
  { name: 'Catalogs', href: paths.catalogs(), pages: ['catalogs', 'catalog', 'resource'] },
  { name: 'Audit log', href: paths.audit(), pages: ['audit'] },
  { name: 'Webhooks', href: paths.webhooks(), pages: ['webhooks', 'webhook'] },
] as const;

/** The frame of every page once signed in: the banner with the navigation and the account, then the page. */
export function Layout(props: { session: SignedIn; route: Route; children: ComponentChildren }) {
  const { session, route } = props;
  const { accounts } = session.me;
  return (
    <>
      <a class="skip" href="#main">
        Skip to the page
      </a>
      <header class="banner">
        <span class="brand">Playbook console</span>
        <nav aria-label="Console">
          <ul>
            {SECTIONS.map((section) => (
              <li key={section.name}>
                <Link href={section.href} current={(section.pages as readonly string[]).includes(route.page)}>
                  {section.name}
                </Link>
              </li>
            ))}
          </ul>
        </nav>
        <div class="who">
          {accounts.length > 0 && (
            <>
              {/* Named "Account" alone (D33): a label around the select would add the option shown. */}
              <label for="account-switcher">Account</label>
              <select
                id="account-switcher"
                value={session.accountId}
                onChange={(event) => switchAccount((event.target as HTMLSelectElement).value)}
              >
                {accounts.map((account) => (
                  <option key={account.id} value={account.id}>
                    {account.name ? `${account.name} (${account.id})` : account.id}
                  </option>
                ))}
              </select>
            </>
          )}
          <span class="user">{session.me.user.id}</span>
          <button type="button" onClick={signOut}>
            Sign out
          </button>
        </div>
      </header>
      <main id="main" tabIndex={-1}>
        {props.children}
      </main>
    </>
  );
}

/** The page's one heading, where focus goes when the page changes, so that a screen reader reads it. */
export function PageTitle(props: { children: ComponentChildren }) {
  return (
    <h1 tabIndex={-1} class="page-title">
      {props.children}
    </h1>
  );
}

/** A page that needs an account, for a user whose token names none. */
export function NoAccount() {
  return (
    <p class="empty">
      Your sign-in names no account. Keys, the audit log and webhooks belong to an account: sign in with one.
    </p>
  );
}

/** A page's heading, with the button of its main action beside it when it has one ("Create key"). */
export function PageHeader(props: { title: string; action?: { label: string; run: () => void } }) {
  return (
    <div class="title-row">
      <PageTitle>{props.title}</PageTitle>
      {props.action && (
        <button type="button" class="primary" onClick={props.action.run}>
          {props.action.label}
        </button>
      )}
    </div>
  );
}
