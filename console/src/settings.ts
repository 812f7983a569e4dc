/** What the service tells the page of its deployment, in `<meta name="playbook-console">` (D33). */
export interface ConsoleSettings {
  readonly oidc?: { readonly issuer: string; readonly clientId: string };
  readonly devSignIn: boolean;
}

function isSettings(value: unknown): value is ConsoleSettings {
  if (typeof value !== 'object' || value === null) return false;
  const settings = value as Record<string, unknown>;
  if (typeof settings.devSignIn !== 'boolean') return false;
  if (settings.oidc === undefined) return true;
  const oidc = settings.oidc as Record<string, unknown> | null;
  return typeof oidc?.issuer === 'string' && typeof oidc.clientId === 'string';
}

/** The settings of this page; none of the ways to sign in when the element is missing or unreadable. */
export function readSettings(document: Document): ConsoleSettings {
  const content = document.querySelector('meta[name="playbook-console"]')?.getAttribute('content');
  try {
    const parsed: unknown = content ? JSON.parse(content) : undefined;
    if (isSettings(parsed)) return parsed;
  } catch {
    // An unreadable element offers no sign-in, as a missing one does.
  }
  return { devSignIn: false };
}
