import fs from 'node:fs/promises';
import path from 'node:path';
import type { FastifyInstance } from 'fastify';
import { expect } from 'vitest';
import { importTree } from '../../src/import/import-tree.js';
import type { TestBackend } from './backend.js';
import type { TestIdentity } from './credentials.js';
import { publishedResource } from './publish-bodies.js';

/** What the sync tests write and read: trees of the service's Catalogs, pages followed, a follower's copy. */

export interface Item {
  readonly type: 'catalog' | 'resource' | 'removed';
  readonly catalog?: Record<string, unknown> & { id: string; owner: string; slug: string };
  readonly resource?: Record<string, unknown> & { id: string; catalogId: string; slug: string };
  readonly entity?: 'catalog' | 'resource';
  readonly id?: string;
}

export interface Page {
  readonly data: Item[];
  readonly nextPageToken?: string;
  readonly nextSyncToken?: string;
}

/** A Resource of a tree: a resource file's fields. */
export type ResourceFile = Record<string, unknown>;

export interface CatalogTree {
  readonly catalog: Record<string, unknown>;
  readonly resources: Record<string, ResourceFile>;
}

let trees = 0;

/** Imports Catalogs of the service (`playbook import --owner svc`) through the identity's unit of work. */
export async function importService(
  backend: TestBackend,
  identity: TestIdentity,
  catalogs: Record<string, CatalogTree>,
): Promise<void> {
  const dir = path.join(backend.workDir, `sync-tree-${++trees}`);
  for (const [slug, tree] of Object.entries(catalogs)) {
    await fs.mkdir(path.join(dir, slug, 'resources'), { recursive: true });
    await fs.writeFile(path.join(dir, slug, 'catalog.json'), JSON.stringify(tree.catalog));
    for (const [resourceSlug, file] of Object.entries(tree.resources)) {
      await fs.writeFile(path.join(dir, slug, 'resources', `${resourceSlug}.json`), JSON.stringify(file));
    }
  }
  await importTree(
    { db: backend.databases.primary, objectStore: backend.objectStore, writes: identity.writes },
    { dir, owner: { kind: 'svc' } },
  );
  await fs.rm(dir, { recursive: true, force: true });
}

/** A resource file, valid unless `overrides` make it otherwise: a published Resource's fields, no slug. */
export function resourceFile(slug: string, overrides: Record<string, unknown> = {}): ResourceFile {
  const { slug: _slug, ...file } = publishedResource(slug, { version: '1', ...overrides });
  return file;
}

/** A Catalog of the writer's account, published with one Resource: a first change of that account. */
export async function publishCatalog(
  app: FastifyInstance,
  writer: Record<string, string>,
  slug: string,
): Promise<void> {
  const res = await app.inject({
    method: 'PUT',
    url: `/v3/playbook/catalogs/org/${slug}`,
    headers: writer,
    payload: { name: slug, version: '1', resources: [publishedResource('first')] },
  });
  expect(res.statusCode, res.body).toBe(201);
}

/** A new Resource `slug` in a Catalog of the writer's account: one change of that account. */
export async function publishResource(
  app: FastifyInstance,
  writer: Record<string, string>,
  catalog: string,
  slug: string,
): Promise<string> {
  const { slug: _slug, ...body } = publishedResource(slug);
  const res = await app.inject({
    method: 'PUT',
    url: `/v3/playbook/catalogs/org/${catalog}/resources/${slug}`,
    headers: writer,
    payload: body,
  });
  expect(res.statusCode, res.body).toBe(201);
  return slug;
}

/** One GET of the feed; the status is checked by the caller when it expects a refusal. */
export function syncRequest(
  app: FastifyInstance,
  headers: Record<string, string>,
  query: Record<string, string | number | undefined>,
) {
  const search = new URLSearchParams(
    Object.entries(query).flatMap(([name, value]): [string, string][] =>
      value === undefined ? [] : [[name, String(value)]],
    ),
  );
  const url = `/v3/playbook/sync${search.size > 0 ? `?${search}` : ''}`;
  return app.inject({ url, headers });
}

/** Every page of one sync, from `syncToken` or from the start; fails on anything but 200. */
export async function syncToEnd(
  app: FastifyInstance,
  headers: Record<string, string>,
  options: { syncToken?: string; pageSize?: number } = {},
): Promise<{ items: Item[]; pages: Page[]; syncToken: string }> {
  const pages: Page[] = [];
  let query: Record<string, string | number> = {
    ...(options.syncToken ? { syncToken: options.syncToken } : {}),
    ...(options.pageSize ? { pageSize: options.pageSize } : {}),
  };
  for (let i = 0; i < 10_000; i++) {
    const res = await syncRequest(app, headers, query);
    expect(res.statusCode, res.body).toBe(200);
    const page = res.json() as Page;
    pages.push(page);
    // Exactly one position on every page.
    expect(Number(page.nextPageToken !== undefined) + Number(page.nextSyncToken !== undefined)).toBe(1);
    if (page.nextSyncToken !== undefined) {
      return { items: pages.flatMap((p) => p.data), pages, syncToken: page.nextSyncToken };
    }
    query = { pageToken: page.nextPageToken!, ...(options.pageSize ? { pageSize: options.pageSize } : {}) };
  }
  throw new Error('the sync did not end');
}

/** A follower's copy: what it holds after applying pages, by the rules the guide gives. */
export class Mirror {
  readonly catalogs = new Map<string, NonNullable<Item['catalog']>>();
  readonly resources = new Map<string, NonNullable<Item['resource']>>();

  apply(items: readonly Item[]): void {
    for (const item of items) {
      if (item.type === 'catalog') this.catalogs.set(item.catalog!.id, item.catalog!);
      else if (item.type === 'resource') this.resources.set(item.resource!.id, item.resource!);
      else if (item.entity === 'catalog') {
        this.catalogs.delete(item.id!);
        // A removed Catalog takes its Resources with it.
        for (const [id, resource] of this.resources)
          if (resource.catalogId === item.id) this.resources.delete(id);
      } else {
        this.resources.delete(item.id!);
      }
    }
  }
}

/** Every item of a list operation, page by page. */
export async function listAll(
  app: FastifyInstance,
  headers: Record<string, string>,
  url: string,
): Promise<Record<string, unknown>[]> {
  const items: Record<string, unknown>[] = [];
  for (let page = 1; ; page++) {
    const res = await app.inject({
      url: `${url}${url.includes('?') ? '&' : '?'}page=${page}&pageSize=100`,
      headers,
    });
    expect(res.statusCode, res.body).toBe(200);
    const body = res.json() as { data: Record<string, unknown>[]; meta: { pageCount: number } };
    items.push(...body.data);
    if (page >= body.meta.pageCount) return items;
  }
}

/** What the list operations show a caller: its Catalogs, and each one's Resources, by id. */
export async function listed(app: FastifyInstance, headers: Record<string, string>) {
  const catalogs = await listAll(app, headers, '/v3/playbook/catalogs');
  const resources: Record<string, unknown>[] = [];
  for (const catalog of catalogs) {
    resources.push(
      ...(await listAll(app, headers, `/v3/playbook/catalogs/${catalog.owner}/${catalog.slug}/resources`)),
    );
  }
  return {
    catalogs: new Map(catalogs.map((catalog) => [catalog.id as string, catalog])),
    resources: new Map(resources.map((resource) => [resource.id as string, resource])),
  };
}
