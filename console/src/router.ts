import { Store } from './store';

/** The console's own routes, all under /console: the service answers each with the same page. */
export const BASE = '/console';

export type Route =
  | { readonly page: 'keys' }
  | { readonly page: 'catalogs' }
  | { readonly page: 'catalog'; readonly owner: 'svc' | 'org'; readonly slug: string }
  | { readonly page: 'resource'; readonly resourceId: string; readonly versionId?: string }
  | { readonly page: 'audit' }
  | { readonly page: 'webhooks' }
  | { readonly page: 'webhook'; readonly endpointId: string }
  | { readonly page: 'not-found' };

/** The address the page shows, path and query: where a sign-in comes back to. */
export const address = new Store<string>(location.pathname + location.search);

window.addEventListener('popstate', () => address.set(location.pathname + location.search));

/** Goes to `path` (under /console) without loading the page again. */
export function navigate(path: string, replace = false): void {
  if (replace) history.replaceState(null, '', path);
  else history.pushState(null, '', path);
  address.set(path);
}

const segment = (text: string | undefined) => (text === undefined ? undefined : decodeURIComponent(text));

/** Which page an address shows. */
export function routeOf(path: string): Route {
  const pathname = path.split('?')[0] ?? '';
  const parts = pathname.replace(/\/+$/, '').split('/').slice(2);
  const [first, second, third, fourth, fifth] = parts;
  if (first === undefined || first === 'keys') return parts.length <= 1 ? { page: 'keys' } : notFound;
  if (first === 'catalogs') {
    if (second === undefined) return { page: 'catalogs' };
    if ((second === 'svc' || second === 'org') && third !== undefined && fourth === undefined) {
      return { page: 'catalog', owner: second, slug: segment(third)! };
    }
    return notFound;
  }
  if (first === 'resources' && second !== undefined) {
    if (third === undefined) return { page: 'resource', resourceId: segment(second)! };
    if (third === 'versions' && fourth !== undefined && fifth === undefined) {
      return { page: 'resource', resourceId: segment(second)!, versionId: segment(fourth)! };
    }
    return notFound;
  }
  if (first === 'audit' && second === undefined) return { page: 'audit' };
  if (first === 'webhooks') {
    if (second === undefined) return { page: 'webhooks' };
    if (third === undefined) return { page: 'webhook', endpointId: segment(second)! };
  }
  return notFound;
}

const notFound: Route = { page: 'not-found' };

/** The address of a page, its parts encoded. */
export const paths = {
  keys: () => `${BASE}/keys`,
  catalogs: () => `${BASE}/catalogs`,
  catalog: (owner: string, slug: string) => `${BASE}/catalogs/${owner}/${encodeURIComponent(slug)}`,
  resource: (resourceId: string) => `${BASE}/resources/${encodeURIComponent(resourceId)}`,
  version: (resourceId: string, versionId: string) =>
    `${BASE}/resources/${encodeURIComponent(resourceId)}/versions/${encodeURIComponent(versionId)}`,
  audit: () => `${BASE}/audit`,
  webhooks: () => `${BASE}/webhooks`,
  webhook: (endpointId: string) => `${BASE}/webhooks/${encodeURIComponent(endpointId)}`,
};
