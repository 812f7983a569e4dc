/**
 * The yardstick of `npm run bench:scale`'s cold reads: the service a competent developer would write
 * in an afternoon with Express and better-sqlite3. One table holds each Resource's detail in columns
 * (scale-data.ts fills it with the same Resources as the service's database); a request checks its
 * key, reads the row by primary key, shapes it as the service's Resource detail and lets Express send
 * it (with Express's own ETag). No answer is kept in memory: every read is a cold read.
 *
 * Usage: node naive.js <database file> <port> <api key>
 */
import express from 'express';
import { sqliteDriver } from '../src/db/create-db.js';

interface Item {
  id: string;
  catalog_id: string;
  catalog_human_ref: string;
  source_scope: string;
  slug: string;
  human_ref: string;
  kind: string;
  title: string;
  status: string;
  description: string | null;
  facets: string | null;
  manifest: string;
  created_at: string;
  updated_at: string;
  version_id: string;
  version: string;
  content_hash: string;
  content_size_bytes: number;
  media_type: string;
  storage_backend: string;
  version_status: string;
  published_at: string;
  content: string;
}

const [file, port, key] = process.argv.slice(2);
if (!file || !port || !key) throw new Error('usage: naive.js <database file> <port> <api key>');

const Driver = sqliteDriver();
const db = new Driver(file, { readonly: true });
db.pragma('journal_mode = WAL');
const byId = db.prepare<[string], Item>('select * from items where id = ?');

const app = express();
app.get('/ready', (_request, response) => {
  response.json({ ready: true });
});
app.get('/v3/playbook/resources/:id', (request, response) => {
  if (request.get('x-api-key') !== key) {
    response.status(401).json({ code: 'unauthenticated' });
    return;
  }
  const item = byId.get(request.params.id);
  if (!item) {
    response.status(404).json({ code: 'not_found' });
    return;
  }
  response.set('cache-control', 'private, no-cache').json({
    id: item.id,
    catalogId: item.catalog_id,
    catalogHumanRef: item.catalog_human_ref,
    sourceScope: item.source_scope,
    slug: item.slug,
    humanRef: item.human_ref,
    kind: item.kind,
    title: item.title,
    status: item.status,
    manifest: JSON.parse(item.manifest),
    createdAt: item.created_at,
    updatedAt: item.updated_at,
    ...(item.description === null ? {} : { description: item.description }),
    ...(item.facets === null ? {} : { facets: JSON.parse(item.facets) }),
    currentVersion: {
      id: item.version_id,
      version: item.version,
      contentHash: item.content_hash,
      contentSizeBytes: item.content_size_bytes,
      mediaType: item.media_type,
      storageBackend: item.storage_backend,
      status: item.version_status,
      publishedAt: item.published_at,
      manifest: JSON.parse(item.manifest),
      content: item.content,
    },
  });
});
app.listen(Number(port), '127.0.0.1');
