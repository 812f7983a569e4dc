import { v7 as uuidv7 } from 'uuid';
import type { Authenticator } from '../../src/auth/authenticator.js';
import type { Principal } from '../../src/auth/principal.js';
import type { ContentStore } from '../../src/content/content-store.js';
import { sha256Hex, utf8Size } from '../../src/content/hash.js';
import type { Db } from '../../src/db/tables.js';

const reader: Principal = {
  accountId: null,
  plan: 'free',
  scopes: new Set(['playbook:read']),
  credential: { kind: 'api-key', keyId: 'storage-tests' },
  restrictions: null,
};

/**
 * Admits every request as a reader of service-owned content: the outage tests are about storage, and
 * a credential check of their own would put a second backend on the path under test.
 */
export const anyReader: Authenticator = { authenticate: async () => reader };

/**
 * Rows for the outage tests: a service-owned catalog and published resources whose content lives in
 * the given store. Written directly, so that these tests depend on storage alone.
 */

/** An active Catalog, service-owned unless an account is given; returns its id. */
export async function seedCatalog(db: Db, slug: string, accountId: string | null = null): Promise<string> {
  const id = uuidv7();
  const at = new Date().toISOString();
  await db
    .insertInto('catalogs')
    .values({
      id,
      account_id: accountId,
      slug,
      name: slug,
      status: 'active',
      description: null,
      facets: null,
      current_version_id: null,
      created_at: at,
      updated_at: at,
      archived_at: null,
    })
    .execute();
  return id;
}

/** A published resource with one version whose content is put into `store`; returns its id. */
export async function seedResource(
  db: Db,
  catalogId: string,
  store: ContentStore,
  slug: string,
  content: string,
): Promise<string> {
  const id = uuidv7();
  const versionId = uuidv7();
  const hash = sha256Hex(content);
  const at = new Date().toISOString();
  await store.put(hash, content);
  await db
    .insertInto('resources')
    .values({
      id,
      catalog_id: catalogId,
      slug,
      kind: 'document',
      title: slug,
      status: 'active',
      description: null,
      facets: null,
      manifest: '{}',
      current_version_id: versionId,
      created_at: at,
      updated_at: at,
      archived_at: null,
    })
    .execute();
  await db
    .insertInto('resource_versions')
    .values({
      id: versionId,
      resource_id: id,
      version: '1.0.0',
      content_hash: hash,
      content_size_bytes: utf8Size(content),
      media_type: 'text/markdown',
      storage_backend: store.backend,
      status: 'published',
      manifest: '{}',
      published_at: at,
      superseded_at: null,
      archived_at: null,
      created_at: at,
    })
    .execute();
  return id;
}

/** One answer of a trickle of requests, with how long it took. */
export interface Timed {
  readonly url: string;
  readonly status: number;
  readonly ms: number;
  readonly contentType: string;
  readonly body: string;
}

/** A real HTTP request with a hard client-side limit, so that a hung answer fails the test, not the run. */
export async function timedGet(
  base: string,
  url: string,
  headers: Record<string, string> = {},
): Promise<Timed> {
  const started = performance.now();
  try {
    const response = await fetch(`${base}${url}`, { headers, signal: AbortSignal.timeout(15_000) });
    const body = await response.text();
    return {
      url,
      status: response.status,
      ms: performance.now() - started,
      contentType: response.headers.get('content-type') ?? '',
      body,
    };
  } catch (error) {
    return { url, status: 0, ms: performance.now() - started, contentType: '', body: String(error) };
  }
}
