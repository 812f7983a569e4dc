import { useEffect, useRef, useState } from 'preact/hooks';
import { Layout, PageTitle } from './components/layout';
import { Link } from './components/link';
import type { OidcSignIn } from './oidc';
import { AuditPage } from './pages/audit';
import { CatalogPage } from './pages/catalog';
import { CatalogsPage } from './pages/catalogs';
import { KeysPage } from './pages/keys';
import { ResourcePage } from './pages/resource';
import { SignInPage } from './pages/sign-in';
import { WebhookPage } from './pages/webhook';
import { WebhooksPage } from './pages/webhooks';
import { address, paths, type Route, routeOf } from './router';
import { insecureOrigin, type SignedIn, session, signIn } from './session';
import type { ConsoleSettings } from './settings';
import { useStore } from './store';

function Page(props: { route: Route; session: SignedIn }) {
  const { route, session } = props;
  switch (route.page) {
    case 'keys':
      return <KeysPage session={session} />;
    case 'catalogs':
      return <CatalogsPage session={session} />;
    case 'catalog':
      return <CatalogPage session={session} owner={route.owner} slug={route.slug} />;
    case 'resource':
      return <ResourcePage session={session} resourceId={route.resourceId} versionId={route.versionId} />;
    case 'audit':
      return <AuditPage session={session} />;
    case 'webhooks':
      return <WebhooksPage session={session} />;
    case 'webhook':
      return <WebhookPage session={session} endpointId={route.endpointId} />;
    default:
      return (
        <>
          <PageTitle>Page not found</PageTitle>
          <p>
            The console has no page at this address. <Link href={paths.keys()}>Go to the keys</Link>.
          </p>
        </>
      );
  }
}

/**
 * The console: the sign-in until someone is signed in, then the page the address names. A reload
 * first tries the identity provider without a prompt, where there is one.
 */
export function App(props: { settings: ConsoleSettings; oidc: OidcSignIn | undefined }) {
  const current = useStore(session);
  const path = useStore(address);
  const route = routeOf(path);
  const [starting, setStarting] = useState(props.oidc !== undefined && !insecureOrigin(location));
  const main = useRef<HTMLDivElement>(null);

  useEffect(() => {
    const { oidc } = props;
    if (!starting || !oidc) return;
    void oidc
      .signInSilently()
      .then(
        (token) => token && signIn(token.accessToken, token.expiresAt, 'oidc', () => oidc.signInSilently()),
      )
      .catch(() => undefined)
      .finally(() => setStarting(false));
  }, [starting, props]);

  // A new page, or the page again after a sign-in, says so: focus goes to its heading.
  const signedIn = current.kind === 'signed-in';
  const shown = useRef<string | undefined>(undefined);
  useEffect(() => {
    if (!signedIn) {
      shown.current = undefined;
      return;
    }
    if (shown.current !== path)
      main.current?.querySelector<HTMLElement>('h1')?.focus({ preventScroll: true });
    shown.current = path;
  }, [path, signedIn]);

  if (starting) {
    return (
      <main id="main" class="sign-in">
        <h1>Signing in…</h1>
        <p role="status">Asking your identity provider whether you are signed in.</p>
      </main>
    );
  }
  if (current.kind === 'signed-out') {
    return <SignInPage settings={props.settings} oidc={props.oidc} expired={current.reason === 'expired'} />;
  }
  return (
    <div ref={main}>
      <Layout session={current} route={route}>
        {/* Each account's page is a page of its own: switching accounts loads it afresh. */}
        <Page key={`${current.accountId}:${route.page}`} route={route} session={current} />
      </Layout>
    </div>
  );
}
