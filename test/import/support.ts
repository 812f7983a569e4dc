import { createHash } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { ListObjectsV2Command } from '@aws-sdk/client-s3';
import { sql } from 'kysely';
import { inject } from 'vitest';
import type { ImportOptions, ImportReport } from '../../src/import/import-tree.js';
import { importTree } from '../../src/import/import-tree.js';
import { s3AdminClient, type TestBackend } from '../helpers/backend.js';

/**
 * Trees on disk and snapshots of storage for the import tests. Expected values (hashes, pins) are
 * computed here without the service's own helpers, so that a test can catch a wrong helper.
 */

export type TreeFiles = Record<string, string | Buffer | Record<string, unknown>>;

/** Writes `files` (paths relative to `root`; objects become JSON) and returns `root`. */
export async function writeTree(root: string, files: TreeFiles): Promise<string> {
  for (const [relative, body] of Object.entries(files)) {
    const file = path.join(root, relative);
    await fs.mkdir(path.dirname(file), { recursive: true });
    const data =
      typeof body === 'string' || Buffer.isBuffer(body) ? body : `${JSON.stringify(body, null, 2)}\n`;
    await fs.writeFile(file, data);
  }
  return root;
}

export async function removeFromTree(root: string, ...relatives: string[]): Promise<void> {
  for (const relative of relatives) await fs.rm(path.join(root, relative), { recursive: true, force: true });
}

export function catalogJson(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return { name: 'Engineering handbook', version: '1.0.0', ...overrides };
}

export function resourceJson(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    kind: 'document',
    title: 'A document',
    version: '1.0.0',
    mediaType: 'text/markdown',
    content: '# A document\n',
    ...overrides,
  };
}

let trees = 0;
/** A fresh, empty folder for one tree inside the backend's work directory. */
export async function newTreeDir(backend: TestBackend): Promise<string> {
  const dir = path.join(backend.workDir, `tree-${++trees}`);
  await fs.mkdir(dir, { recursive: true });
  return dir;
}

/** Imports as the service unless told otherwise, with a fixed clock. */
export function runImport(
  backend: TestBackend,
  dir: string,
  options: Partial<ImportOptions> & { at?: string } = {},
): Promise<ImportReport> {
  const { at, ...rest } = options;
  return importTree(
    { db: backend.databases.primary, objectStore: backend.objectStore },
    { dir, owner: { kind: 'svc' }, ...(at ? { now: () => at } : {}), ...rest },
  );
}

export interface StorageDump {
  readonly tables: Record<string, unknown[]>;
  /** Every object of the object store: key → size and modification stamp. */
  readonly objects: Record<string, string>;
}

/** Every row of every table, and every object of the object store, in a stable order. */
export async function dumpStorage(backend: TestBackend): Promise<StorageDump> {
  const db = backend.databases.primary;
  const tables: Record<string, unknown[]> = {};
  for (const table of await db.introspection.getTables()) {
    const result = await sql<Record<string, unknown>>`select * from ${sql.table(table.name)}`.execute(db);
    tables[table.name] = result.rows.map((row) => JSON.stringify(row)).sort();
  }
  return { tables, objects: await listObjects(backend) };
}

async function listObjects(backend: TestBackend): Promise<Record<string, string>> {
  const objects: Record<string, string> = {};
  const location = backend.env.PLAYBOOK_CONTENT_STORE ?? '';
  if (location.startsWith('s3://')) {
    const [bucket = '', ...prefix] = location.slice('s3://'.length).split('/');
    const servers = inject('playbookServers');
    if (!servers) throw new Error('an S3 object store without the S3 test server');
    const client = s3AdminClient(servers.s3);
    try {
      let token: string | undefined;
      do {
        const page = await client.send(
          new ListObjectsV2Command({ Bucket: bucket, Prefix: prefix.join('/'), ContinuationToken: token }),
        );
        for (const object of page.Contents ?? []) {
          objects[object.Key ?? ''] = `${object.Size}@${object.LastModified?.toISOString()}@${object.ETag}`;
        }
        token = page.IsTruncated ? page.NextContinuationToken : undefined;
      } while (token);
    } finally {
      client.destroy();
    }
    return objects;
  }
  const walk = async (dir: string): Promise<void> => {
    const entries = await fs.readdir(dir, { withFileTypes: true }).catch(() => []);
    for (const entry of entries) {
      const full = path.join(dir, entry.name);
      if (entry.isDirectory()) await walk(full);
      else {
        const stat = await fs.stat(full);
        objects[path.relative(location, full)] = `${stat.size}@${stat.mtimeMs}`;
      }
    }
  };
  await walk(location);
  return objects;
}

/** Lowercase hex SHA-256 of the UTF-8 bytes (D12), computed independently of the service. */
export function sha256(text: string): string {
  return createHash('sha256').update(text, 'utf8').digest('hex');
}

/** JSON with keys sorted at every depth, written independently of `canonicalJson`. */
export function sortedJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(sortedJson).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${sortedJson(v)}`).join(',')}}`;
  }
  return JSON.stringify(value);
}

export const UUID_V7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

export const T1 = '2026-03-01T10:00:00.000Z';
export const T2 = '2026-03-02T10:00:00.000Z';
export const T3 = '2026-03-03T10:00:00.000Z';
export const T4 = '2026-03-04T10:00:00.000Z';
