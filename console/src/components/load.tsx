import type { ComponentChildren } from 'preact';
import { useCallback, useEffect, useState } from 'preact/hooks';
import { refusedToken, type SignedIn } from '../session';
import { ProblemView } from './problem';

export type Loaded<T> =
  | { readonly state: 'loading' }
  | { readonly state: 'error'; readonly error: unknown }
  | { readonly state: 'ready'; readonly data: T };

/**
 * Loads what a page shows, again whenever `deps` change or `reload` is called; a refused token sends
 * the user to sign in again, and the page loads once they have.
 */
export function useLoad<T>(load: () => Promise<T>, deps: readonly unknown[]) {
  const [loaded, setLoaded] = useState<Loaded<T>>({ state: 'loading' });
  const [round, setRound] = useState(0);
  useEffect(() => {
    let current = true;
    setLoaded((previous) => (previous.state === 'ready' && round > 0 ? previous : { state: 'loading' }));
    load().then(
      (data) => current && setLoaded({ state: 'ready', data }),
      (error: unknown) => {
        if (!current || refusedToken(error)) return;
        setLoaded({ state: 'error', error });
      },
    );
    return () => {
      current = false;
    };
  }, [...deps, round]);
  const reload = useCallback(() => setRound((n) => n + 1), []);
  return { loaded, reload };
}

/** The loading and error states of a page's data, and what it shows once loaded. */
export function Show<T>(props: {
  loaded: Loaded<T>;
  what: string;
  children: (data: T) => ComponentChildren;
}) {
  const { loaded } = props;
  if (loaded.state === 'loading') {
    return (
      <p class="loading" role="status">
        Loading {props.what}…
      </p>
    );
  }
  if (loaded.state === 'error') return <ProblemView error={loaded.error} />;
  return <>{props.children(loaded.data)}</>;
}

/** What an empty list says. */
export function Empty(props: { children: ComponentChildren }) {
  return <p class="empty">{props.children}</p>;
}

/** Loads what belongs to the account the console acts for (keys, events, endpoints); nothing without one. */
export function useAccountLoad<T>(
  session: SignedIn,
  load: (accountId: string) => Promise<T>,
  deps: readonly unknown[],
) {
  const { accountId, client } = session;
  return useLoad(
    () => (accountId === undefined ? Promise.resolve(undefined) : load(accountId)),
    [client, accountId, ...deps],
  );
}
