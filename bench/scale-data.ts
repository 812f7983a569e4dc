/**
 * The reference data set of `npm run bench:scale` (D30), written straight into storage: 1,000
 * accounts, 1,000,000 Resources of 2 KiB of content each in 10,000 Catalogs, one of them of 100,000
 * (all of it scaled down with the Resource count for quick runs). It is the bench's setup, not what
 * it measures: rows go in by bulk statements in large transactions, contents straight into the
 * object store's files, so that a million Resources take minutes rather than an hour of publishing.
 * What is measured afterwards goes through the service.
 *
 * The layout:
 * - the service owns `big` (a tenth of the Resources) and nine catalogs of a hundredth of a percent
 *   each, visible to every caller;
 * - each account owns ten catalogs, which share the rest of the Resources;
 * - every tenth Resource keeps its content in the object store (`object-storage`, as a large
 *   document would), the rest in the database (`database-text`, the default for 2 KiB);
 * - ids are made from positions (UUIDv7-shaped), so the bench names any Resource without a query.
 *
 * The same Resources also fill the yardstick's database (naive.ts): one row per Resource, its whole
 * detail in columns.
 */
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import type BetterSqlite3 from 'better-sqlite3';
import { PINS_PART_CHARS } from '../src/catalog/stored-pins.js';
import { manifestHashOf } from '../src/catalog-writes/catalog-pins.js';
import { sqliteDriver } from '../src/db/create-db.js';
import { textParts } from '../src/foundation/text-parts.js';
import type { ResourcePin } from '../src/schemas/playbook.js';

export interface ScaleShape {
  readonly resources: number;
  readonly accounts: number;
  /** Resources of the service's `big` catalog. */
  readonly bigCatalog: number;
  /** Catalogs in all, `big` included. */
  readonly catalogs: number;
  readonly contentBytes: number;
}

/** The reference shape of D30 for `resources` (1,000,000), every count scaled with it. */
export function shapeFor(resources: number): ScaleShape {
  const accounts = Math.max(2, Math.round(resources / 1000));
  return {
    resources,
    accounts,
    // A tenth, as D30 has it; half of a smaller set, so that quick runs have a list of 100,000 pins too.
    bigCatalog: Math.max(Math.round(resources / 10), Math.min(100_000, Math.round(resources / 2))),
    catalogs: 10 + accounts * 10 - 1,
    contentBytes: 2048,
  };
}

export const SERVICE_CATALOGS = 10;
export const ACCOUNT_CATALOGS = 10;
const KINDS = ['document', 'topic', 'reference', 'workflow', 'policy'] as const;
const AT = '2026-01-05T10:00:00.000Z';

/** A UUIDv7-shaped id made from a kind nibble and a position. */
function idOf(kind: number, index: number): string {
  return `01940000-0000-7${kind.toString(16).padStart(3, '0')}-8000-${index.toString(16).padStart(12, '0')}`;
}
export const resourceIdOf = (index: number) => idOf(1, index);
const versionIdOf = (index: number) => idOf(2, index);
const catalogIdOf = (index: number) => idOf(3, index);
const catalogVersionIdOf = (index: number) => idOf(4, index);

export function accountIdOf(index: number): string {
  return `acct-${String(index).padStart(4, '0')}`;
}

/** One Catalog of the data set: whose, its slug, and which Resources (a range of positions). */
export interface PlannedCatalog {
  readonly index: number;
  readonly accountId: string | null;
  readonly slug: string;
  readonly first: number;
  readonly count: number;
}

/** Every Catalog of the shape, in order; their Resources are consecutive positions. */
export function catalogsOf(shape: ScaleShape): PlannedCatalog[] {
  const catalogs: PlannedCatalog[] = [];
  let next = 0;
  const add = (accountId: string | null, slug: string, count: number) => {
    catalogs.push({ index: catalogs.length, accountId, slug, first: next, count });
    next += count;
  };
  add(null, 'big', shape.bigCatalog);
  const small = Math.max(1, Math.round(shape.resources / 10_000));
  for (let i = 1; i < SERVICE_CATALOGS; i++) add(null, `svc-${String(i).padStart(2, '0')}`, small);
  const rest = shape.resources - next;
  const perAccountCatalogs = shape.accounts * ACCOUNT_CATALOGS;
  for (let a = 0; a < shape.accounts; a++) {
    for (let c = 0; c < ACCOUNT_CATALOGS; c++) {
      const n = a * ACCOUNT_CATALOGS + c;
      const count =
        Math.floor((rest * (n + 1)) / perAccountCatalogs) - Math.floor((rest * n) / perAccountCatalogs);
      add(accountIdOf(a), `c-${String(c).padStart(2, '0')}`, count);
    }
  }
  return catalogs;
}

const WORDS =
  'alert backup cluster deploy escalate failover gateway handover incident journal kernel latency ' +
  'metric network on-call pager quorum rollback runbook shard timeout upgrade volume warmup'.split(' ');

/** The Resource at `index`: every field the rows need, its content 2 KiB of text of its own. */
export function resourceAt(index: number, catalog: PlannedCatalog, shape: ScaleShape) {
  const slug = `r-${String(index - catalog.first).padStart(6, '0')}`;
  let seed = (index + 1) * 2_654_435_761;
  const words: string[] = [`# ${catalog.slug}/${slug}\n\n`];
  let length = words[0]!.length;
  while (length < shape.contentBytes) {
    seed = (seed * 1_103_515_245 + 12_345) % 2_147_483_648;
    const word = `${WORDS[seed % WORDS.length]!}${seed % 7 === 0 ? '.\n' : ' '}`;
    words.push(word);
    length += word.length;
  }
  const content = words.join('').slice(0, shape.contentBytes);
  const manifest = JSON.stringify({
    owner: 'platform-team',
    order: index,
    steps: [
      { id: 'check', timeoutSeconds: 60 },
      { id: 'act', timeoutSeconds: 120 },
    ],
  });
  return {
    id: resourceIdOf(index),
    versionId: versionIdOf(index),
    slug,
    kind: KINDS[index % KINDS.length]!,
    title: `Resource ${index}`,
    description: `How the platform team handles situation number ${index}.`,
    facets: '{"technology":["node"],"channel":["stable"]}',
    manifest,
    content,
    contentHash: createHash('sha256').update(content).digest('hex'),
    storageBackend: index % 10 === 9 ? ('object-storage' as const) : ('database-text' as const),
  };
}

/** Where `object-storage` contents go: the directory store's layout, or s3rver's files for a bucket. */
export type ObjectFiles = { kind: 'directory'; root: string } | { kind: 's3rver'; bucketDir: string };

function writeObject(files: ObjectFiles, hash: string, content: string): void {
  if (files.kind === 'directory') {
    const dir = path.join(files.root, hash.slice(0, 2));
    fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
    fs.writeFileSync(path.join(dir, hash), content, { mode: 0o600 });
    return;
  }
  // s3rver keeps an object as `<key>._S3rver_object` beside its MD5, which it would otherwise make on
  // the first read (S3ContentStore's key: sha256/<2 hex>/<hash>).
  const dir = path.join(files.bucketDir, 'sha256', hash.slice(0, 2));
  fs.mkdirSync(dir, { recursive: true });
  const file = path.join(dir, `${hash}._S3rver_object`);
  fs.writeFileSync(file, content);
  fs.writeFileSync(`${file}.md5`, createHash('md5').update(content).digest('hex'));
}

/** Rows of one batch, per table, in the tables' column order. */
interface Batch {
  catalogs: unknown[][];
  facets: unknown[][];
  catalogVersions: unknown[][];
  versionPins: unknown[][];
  resources: unknown[][];
  versions: unknown[][];
  blobs: unknown[][];
  naive: unknown[][];
}

const COLUMNS = {
  catalogs: [
    'id',
    'account_id',
    'slug',
    'name',
    'status',
    'description',
    'facets',
    'current_version_id',
    'created_at',
    'updated_at',
    'archived_at',
  ],
  catalog_facet_values: ['catalog_id', 'facet', 'value'],
  catalog_versions: [
    'id',
    'catalog_id',
    'version',
    'manifest_hash',
    'resource_count',
    'published_at',
    'created_at',
  ],
  catalog_version_pins: ['version_id', 'part', 'json'],
  resources: [
    'id',
    'catalog_id',
    'slug',
    'kind',
    'title',
    'status',
    'description',
    'facets',
    'manifest',
    'current_version_id',
    'created_at',
    'updated_at',
    'archived_at',
  ],
  resource_versions: [
    'id',
    'resource_id',
    'version',
    'content_hash',
    'content_size_bytes',
    'media_type',
    'storage_backend',
    'status',
    'manifest',
    'published_at',
    'superseded_at',
    'archived_at',
    'created_at',
  ],
  content_blobs: ['content_hash', 'body'],
} as const;

/** The yardstick's one table: a Resource's detail, every field a column. */
export const NAIVE_COLUMNS = [
  'id',
  'catalog_id',
  'catalog_human_ref',
  'source_scope',
  'slug',
  'human_ref',
  'kind',
  'title',
  'status',
  'description',
  'facets',
  'manifest',
  'created_at',
  'updated_at',
  'version_id',
  'version',
  'content_hash',
  'content_size_bytes',
  'media_type',
  'storage_backend',
  'version_status',
  'published_at',
  'content',
] as const;

/**
 * Makes the batches of the whole data set, a few thousand Resources each, and writes each object's
 * file as it goes. `naive` says whether the yardstick's rows are wanted too.
 */
async function forEachBatch(
  shape: ScaleShape,
  objects: ObjectFiles | undefined,
  naive: boolean,
  write: (batch: Batch) => Promise<void>,
  progress: (line: string) => void,
): Promise<void> {
  const emptyBatch = (): Batch => ({
    catalogs: [],
    facets: [],
    catalogVersions: [],
    versionPins: [],
    resources: [],
    versions: [],
    blobs: [],
    naive: [],
  });
  let batch = emptyBatch();
  let inBatch = 0;
  let done = 0;
  let reported = 0;
  const started = performance.now();
  for (const catalog of catalogsOf(shape)) {
    const owner = catalog.accountId === null ? 'svc' : 'org';
    const pins: ResourcePin[] = [];
    const catalogId = catalogIdOf(catalog.index);
    const versionId = catalogVersionIdOf(catalog.index);
    // Before its Resources, which name it (a foreign key).
    batch.catalogs.push([
      catalogId,
      catalog.accountId,
      catalog.slug,
      `Catalog ${catalog.slug}`,
      'active',
      `Runbooks of ${catalog.accountId ?? 'the service'}.`,
      '{"capability":["operations"]}',
      versionId,
      AT,
      AT,
      null,
    ]);
    batch.facets.push([catalogId, 'capability', 'operations']);
    for (let index = catalog.first; index < catalog.first + catalog.count; index++) {
      const r = resourceAt(index, catalog, shape);
      const humanRef = `${owner}/${catalog.slug}/${r.slug}`;
      pins.push({
        resourceId: r.id,
        resourceHumanRef: humanRef,
        resourceVersionId: r.versionId,
        version: '1.0.0',
        contentHash: r.contentHash,
      });
      batch.resources.push([
        r.id,
        catalogId,
        r.slug,
        r.kind,
        r.title,
        'active',
        r.description,
        r.facets,
        r.manifest,
        r.versionId,
        AT,
        AT,
        null,
      ]);
      batch.versions.push([
        r.versionId,
        r.id,
        '1.0.0',
        r.contentHash,
        r.content.length,
        'text/markdown',
        r.storageBackend,
        'published',
        r.manifest,
        AT,
        null,
        null,
        AT,
      ]);
      if (r.storageBackend === 'database-text') batch.blobs.push([r.contentHash, r.content]);
      else if (objects) writeObject(objects, r.contentHash, r.content);
      if (naive) {
        batch.naive.push([
          r.id,
          catalogId,
          `${owner}/${catalog.slug}`,
          owner === 'svc' ? 'svc' : 'account',
          r.slug,
          humanRef,
          r.kind,
          r.title,
          'active',
          r.description,
          r.facets,
          r.manifest,
          AT,
          AT,
          r.versionId,
          '1.0.0',
          r.contentHash,
          r.content.length,
          'text/markdown',
          r.storageBackend,
          'published',
          AT,
          r.content,
        ]);
      }
      if (++inBatch >= 5000) {
        await write(batch);
        batch = emptyBatch();
        inBatch = 0;
      }
    }
    batch.catalogVersions.push([
      versionId,
      catalogId,
      '1.0.0',
      await manifestHashOf(pins),
      pins.length,
      AT,
      AT,
    ]);
    for (const [part, json] of textParts(JSON.stringify(pins), PINS_PART_CHARS).entries()) {
      batch.versionPins.push([versionId, part, json]);
    }
    done += catalog.count;
    if (done - reported >= 100_000 || done === shape.resources) {
      reported = done;
      const seconds = (performance.now() - started) / 1000;
      progress(`  data set: ${done} of ${shape.resources} resources (${seconds.toFixed(0)} s)`);
    }
  }
  await write(batch);
}

/** Fills a migrated SQLite database. */
export async function fillSqlite(
  file: string,
  shape: ScaleShape,
  objects: ObjectFiles,
  progress: (line: string) => void,
): Promise<void> {
  const Driver = sqliteDriver();
  const db = new Driver(file);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = OFF');
  db.pragma('cache_size = -262144');
  const insert = (database: BetterSqlite3.Database, table: string, columns: readonly string[]) =>
    database.prepare(
      `insert into ${table} (${columns.join(', ')}) values (${columns.map(() => '?').join(', ')})`,
    );
  const statements = {
    catalogs: insert(db, 'catalogs', COLUMNS.catalogs),
    facets: insert(db, 'catalog_facet_values', COLUMNS.catalog_facet_values),
    catalogVersions: insert(db, 'catalog_versions', COLUMNS.catalog_versions),
    versionPins: insert(db, 'catalog_version_pins', COLUMNS.catalog_version_pins),
    resources: insert(db, 'resources', COLUMNS.resources),
    versions: insert(db, 'resource_versions', COLUMNS.resource_versions),
    blobs: db.prepare('insert or ignore into content_blobs (content_hash, body) values (?, ?)'),
  };
  const accounts = insert(db, 'accounts', ['id', 'name', 'plan', 'created_at', 'updated_at']);
  db.transaction(() => {
    for (let a = 0; a < shape.accounts; a++) accounts.run(accountIdOf(a), `Account ${a}`, 'free', AT, AT);
  })();
  const writeBatch = db.transaction((batch: Batch) => {
    for (const [name, statement] of Object.entries(statements)) {
      for (const row of batch[name as keyof typeof statements]) statement.run(row);
    }
  });
  await forEachBatch(shape, objects, false, async (batch) => writeBatch(batch), progress);
  db.pragma('wal_checkpoint(TRUNCATE)');
  db.exec('analyze');
  db.close();
}

/** Makes the yardstick's database: one table, a Resource's whole detail per row. */
export async function fillNaive(
  file: string,
  shape: ScaleShape,
  progress: (line: string) => void,
): Promise<void> {
  const Driver = sqliteDriver();
  const naive = new Driver(file);
  naive.pragma('journal_mode = WAL');
  naive.pragma('synchronous = OFF');
  const columns = NAIVE_COLUMNS.map((c) =>
    c === 'id' ? 'id text primary key' : c === 'content_size_bytes' ? `${c} integer` : `${c} text`,
  );
  naive.exec(`create table items (${columns.join(', ')})`);
  const insert = naive.prepare(
    `insert into items (${NAIVE_COLUMNS.join(', ')}) values (${NAIVE_COLUMNS.map(() => '?').join(', ')})`,
  );
  const write = naive.transaction((rows: unknown[][]) => {
    for (const row of rows) insert.run(row);
  });
  await forEachBatch(shape, undefined, true, async (batch) => write(batch.naive), progress);
  // The cold floor's table (cold-floor.ts): each detail as the naive service shapes it, stored whole
  // with a validator, in a rowid table whose rows fit a page each, found through the unique index on id.
  const optional = (column: string, field: string) =>
    `case when ${column} is null then '$.${field}' else '$.__absent' end`;
  naive.exec(
    `create table answers (n integer primary key, id text not null unique, etag text not null, body text not null);
     insert into answers (id, etag, body)
     select id, '"' || version_id || '"', json_remove(json_object(
       'id', id, 'catalogId', catalog_id, 'catalogHumanRef', catalog_human_ref, 'sourceScope', source_scope,
       'slug', slug, 'humanRef', human_ref, 'kind', kind, 'title', title, 'status', status,
       'manifest', json(manifest), 'createdAt', created_at, 'updatedAt', updated_at,
       'description', description, 'facets', json(facets),
       'currentVersion', json_object(
         'id', version_id, 'version', version, 'contentHash', content_hash,
         'contentSizeBytes', content_size_bytes, 'mediaType', media_type, 'storageBackend', storage_backend,
         'status', version_status, 'publishedAt', published_at, 'manifest', json(manifest), 'content', content)),
       ${optional('description', 'description')}, ${optional('facets', 'facets')})
     from items order by id`,
  );
  naive.pragma('wal_checkpoint(TRUNCATE)');
  naive.close();
}

/** Fills a migrated PostgreSQL database, a batch per statement and table (`unnest` of arrays). */
export async function fillPostgres(
  url: string,
  shape: ScaleShape,
  objects: ObjectFiles,
  progress: (line: string) => void,
): Promise<void> {
  const { default: pg } = await import('pg');
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query('set synchronous_commit = off');
    const insert = async (table: keyof typeof COLUMNS, rows: unknown[][], conflict = '') => {
      if (rows.length === 0) return;
      const columns = COLUMNS[table];
      const types = columns.map((c) =>
        c === 'resource_count' || c === 'content_size_bytes' || c === 'part' ? 'integer[]' : 'text[]',
      );
      const arrays = columns.map((_, i) => rows.map((row) => row[i]));
      await client.query(
        `insert into ${table} (${columns.join(', ')}) select * from unnest(${types.map((t, i) => `$${i + 1}::${t}`).join(', ')}) ${conflict}`,
        arrays,
      );
    };
    const accounts = Array.from({ length: shape.accounts }, (_, a) => accountIdOf(a));
    await client.query(
      `insert into accounts (id, name, plan, created_at, updated_at)
       select id, 'Account ' || id, 'free', $2, $2 from unnest($1::text[]) as id`,
      [accounts, AT],
    );
    await forEachBatch(
      shape,
      objects,
      false,
      async (batch) => {
        await client.query('begin');
        await insert('catalogs', batch.catalogs);
        await insert('catalog_facet_values', batch.facets);
        await insert('catalog_versions', batch.catalogVersions);
        await insert('catalog_version_pins', batch.versionPins);
        await insert('resources', batch.resources);
        await insert('resource_versions', batch.versions);
        await insert('content_blobs', batch.blobs, 'on conflict do nothing');
        await client.query('commit');
      },
      progress,
    );
    await client.query('vacuum analyze');
  } finally {
    await client.end();
  }
}
