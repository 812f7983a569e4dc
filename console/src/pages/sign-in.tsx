import { signInForDevelopment } from '@playbook/client';
import { useState } from 'preact/hooks';
import { ProblemView } from '../components/problem';
import type { OidcSignIn } from '../oidc';
import { insecureOrigin, signIn } from '../session';
import type { ConsoleSettings } from '../settings';

/**
 * Signing in (D33): with the deployment's identity provider, and in a test deployment with the
 * development signer, the "Sign in for development" form. Shown in place of the page the user asked
 * for, which shows once they are signed in.
 */
export function SignInPage(props: {
  settings: ConsoleSettings;
  oidc: OidcSignIn | undefined;
  expired: boolean;
}) {
  const { settings, oidc } = props;
  const [error, setError] = useState<unknown>();
  const [busy, setBusy] = useState(false);

  if (insecureOrigin(location)) {
    return (
      <main id="main" class="sign-in">
        <h1>Sign in</h1>
        <div class="problem" role="alert">
          <p class="problem-title">This console does not sign in over plain HTTP</p>
          <p>
            It is served over plain HTTP from {location.host}, which is not this machine: a sign-in would
            cross the network readable by anyone on the way. Open it over HTTPS.
          </p>
        </div>
      </main>
    );
  }

  const attempt = (run: () => Promise<void>) => {
    setBusy(true);
    setError(undefined);
    run().catch((failure: unknown) => {
      setError(failure);
      setBusy(false);
    });
  };

  const withProvider = () =>
    attempt(async () => {
      const token = await oidc!.signIn();
      await signIn(token.accessToken, token.expiresAt, 'oidc', () => oidc!.signInSilently());
    });

  const forDevelopment = (event: Event) => {
    event.preventDefault();
    const form = new FormData(event.currentTarget as HTMLFormElement);
    const user = String(form.get('user') ?? '').trim();
    const accounts = String(form.get('account') ?? '')
      .split(/[\s,]+/)
      .filter((account) => account !== '');
    attempt(async () => {
      const token = await signInForDevelopment({ baseUrl: location.origin }, { user, accounts });
      await signIn(token.accessToken, Date.parse(token.expiresAt), 'development');
    });
  };

  return (
    <main id="main" class="sign-in">
      <h1>Sign in to the Playbook console</h1>
      {props.expired && (
        <p class="notice" role="status">
          Your session has ended. Sign in again to go on where you were.
        </p>
      )}
      {error !== undefined && <ProblemView error={error} />}
      {oidc && (
        <section aria-labelledby="with-provider">
          <h2 id="with-provider">With your identity provider</h2>
          <button type="button" class="primary" disabled={busy} onClick={withProvider}>
            Sign in with {oidc.providerName}
          </button>
        </section>
      )}
      {settings.devSignIn && (
        <section aria-labelledby="for-development">
          <h2 id="for-development">Sign in for development</h2>
          <p class="muted">
            This deployment signs its own tokens for development: sign in as any user, for the accounts you
            name. A live deployment has no such form.
          </p>
          <form onSubmit={forDevelopment} class="stacked">
            <label>
              User
              <input name="user" required autoComplete="username" maxLength={256} />
            </label>
            <label>
              Account
              <input name="account" required aria-describedby="account-help" />
            </label>
            <p id="account-help" class="muted">
              One or more account ids, separated by commas.
            </p>
            <button type="submit" class="primary" disabled={busy}>
              Sign in
            </button>
          </form>
        </section>
      )}
      {!oidc && !settings.devSignIn && (
        <p class="empty">
          This deployment offers no way to sign in to the console: its operators set PLAYBOOK_OIDC_ISSUER and
          PLAYBOOK_OIDC_CLIENT_ID to name the identity provider.
        </p>
      )}
    </main>
  );
}
