import { type Kysely, sql } from 'kysely';

// Written against the dialect-neutral schema builder only (text, integer, partial indexes), so that
// the same migration runs on SQLite and PostgreSQL.
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable('accounts')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('name', 'text')
    .addColumn('plan', 'text', (c) => c.notNull().defaultTo('free'))
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .execute();

  await db.schema
    .createTable('catalogs')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('account_id', 'text', (c) => c.references('accounts.id'))
    .addColumn('slug', 'text', (c) => c.notNull())
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('status', 'text', (c) => c.notNull())
    .addColumn('description', 'text')
    .addColumn('facets', 'text')
    .addColumn('current_version_id', 'text')
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .addColumn('archived_at', 'text')
    .execute();
  // A slug is unique inside its owner namespace: once among service-owned Catalogs, once per account.
  await db.schema
    .createIndex('catalogs_svc_slug_key')
    .on('catalogs')
    .column('slug')
    .unique()
    .where(sql.ref('account_id'), 'is', null)
    .execute();
  await db.schema
    .createIndex('catalogs_account_slug_key')
    .on('catalogs')
    .columns(['account_id', 'slug'])
    .unique()
    .execute();

  await db.schema
    .createTable('catalog_facet_values')
    .addColumn('catalog_id', 'text', (c) => c.notNull().references('catalogs.id').onDelete('cascade'))
    .addColumn('facet', 'text', (c) => c.notNull())
    .addColumn('value', 'text', (c) => c.notNull())
    .addPrimaryKeyConstraint('catalog_facet_values_pkey', ['catalog_id', 'facet', 'value'])
    .execute();
  await db.schema
    .createIndex('catalog_facet_values_lookup')
    .on('catalog_facet_values')
    .columns(['facet', 'value', 'catalog_id'])
    .execute();

  await db.schema
    .createTable('catalog_versions')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('catalog_id', 'text', (c) => c.notNull().references('catalogs.id').onDelete('cascade'))
    .addColumn('version', 'text', (c) => c.notNull())
    .addColumn('pins', 'text', (c) => c.notNull())
    .addColumn('manifest_hash', 'text', (c) => c.notNull())
    .addColumn('resource_count', 'integer', (c) => c.notNull())
    .addColumn('published_at', 'text')
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addUniqueConstraint('catalog_versions_label_key', ['catalog_id', 'version'])
    .execute();

  await db.schema
    .createTable('resources')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('catalog_id', 'text', (c) => c.notNull().references('catalogs.id').onDelete('cascade'))
    .addColumn('slug', 'text', (c) => c.notNull())
    .addColumn('kind', 'text', (c) => c.notNull())
    .addColumn('title', 'text', (c) => c.notNull())
    .addColumn('status', 'text', (c) => c.notNull())
    .addColumn('description', 'text')
    .addColumn('facets', 'text')
    .addColumn('manifest', 'text', (c) => c.notNull())
    .addColumn('current_version_id', 'text')
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .addColumn('archived_at', 'text')
    .addUniqueConstraint('resources_catalog_slug_key', ['catalog_id', 'slug'])
    .execute();
  // The kind-filtered page: rows of one catalog and kind, already in slug order.
  await db.schema
    .createIndex('resources_catalog_kind_slug')
    .on('resources')
    .columns(['catalog_id', 'kind', 'slug'])
    .execute();

  await db.schema
    .createTable('resource_versions')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('resource_id', 'text', (c) => c.notNull().references('resources.id').onDelete('cascade'))
    .addColumn('version', 'text', (c) => c.notNull())
    .addColumn('content_hash', 'text', (c) => c.notNull())
    .addColumn('content_size_bytes', 'integer', (c) => c.notNull())
    .addColumn('media_type', 'text', (c) => c.notNull())
    .addColumn('storage_backend', 'text', (c) => c.notNull())
    .addColumn('status', 'text', (c) => c.notNull())
    .addColumn('manifest', 'text', (c) => c.notNull())
    .addColumn('published_at', 'text')
    .addColumn('superseded_at', 'text')
    .addColumn('archived_at', 'text')
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addUniqueConstraint('resource_versions_label_key', ['resource_id', 'version'])
    .execute();
  // Version history, newest first.
  await db.schema
    .createIndex('resource_versions_history')
    .on('resource_versions')
    .columns(['resource_id', 'created_at', 'id'])
    .execute();

  await db.schema
    .createTable('content_blobs')
    .addColumn('content_hash', 'text', (c) => c.primaryKey())
    .addColumn('body', 'text', (c) => c.notNull())
    .execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  for (const table of [
    'content_blobs',
    'resource_versions',
    'resources',
    'catalog_versions',
    'catalog_facet_values',
    'catalogs',
    'accounts',
  ]) {
    await db.schema.dropTable(table).ifExists().execute();
  }
}
