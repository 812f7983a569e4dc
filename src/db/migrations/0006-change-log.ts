import { type ColumnDefinitionBuilder, type Kysely, sql } from 'kysely';
import type { Dialect } from '../tables.js';

/**
 * The change log (docs/design.md, D26): one row per change every write makes, written in the write's
 * own transaction. `seq` orders it; `data_generation.generation` becomes the log's head, the `seq` of
 * its last change, advanced by each write in the transaction that appends (see changes/change-log.ts),
 * and a bigint on PostgreSQL as `seq` is.
 *
 * The audit trail's events are carried over, oldest first: the audit list reads the log from now on.
 * Events name their target by its human ref (`catalog:org/handbook`); the carried change takes the id
 * of the Catalog or Resource that still has that ref, or keeps the ref. Their table is left in place
 * for one release, unread, so that instances of the previous release keep writing during a rolling
 * deploy (their writes move the head without a change, which tells every follower to start afresh).
 * All of it is one transaction, as every run of migrations is (db/migrate.ts).
 */
export async function up(db: Kysely<unknown>, dialect: Dialect): Promise<void> {
  const text = (column: ColumnDefinitionBuilder) =>
    dialect === 'postgres' ? column.modifyFront(sql`collate "C"`) : column;
  await db.schema
    .createTable('changes')
    .addColumn('seq', dialect === 'postgres' ? 'bigint' : 'integer', (c) => c.primaryKey())
    // UUID v7: the audit list's event id.
    .addColumn('id', 'text', (c) => text(c).notNull().unique())
    .addColumn('at', 'text', (c) => text(c).notNull())
    // `svc` or an account id.
    .addColumn('namespace', 'text', (c) => text(c).notNull())
    .addColumn('type', 'text', (c) => text(c).notNull())
    .addColumn('target_kind', 'text', (c) => text(c).notNull())
    .addColumn('target_id', 'text', (c) => text(c).notNull())
    .addColumn('target_ref', 'text', (c) => text(c))
    .addColumn('actor_type', 'text', (c) => text(c).notNull())
    .addColumn('actor_id', 'text', (c) => text(c))
    .addColumn('request_id', 'text', (c) => text(c))
    .addColumn('summary', 'text', (c) => text(c).notNull())
    .execute();
  // A namespace's changes in order: the audit list (newest first) and a follower of one account.
  await db.schema.createIndex('changes_namespace_seq').on('changes').columns(['namespace', 'seq']).execute();
  if (dialect === 'postgres') {
    await sql`alter table data_generation alter column generation type bigint`.execute(db);
  }

  const events = await sql<AuditEvent>`select * from audit_events order by at, id`.execute(db);
  let seq = 0;
  for (const event of events.rows) {
    seq++;
    const target = await carriedTarget(db, event);
    await sql`insert into changes
      (seq, id, at, namespace, type, target_kind, target_id, target_ref, actor_type, actor_id, request_id, summary)
      values (${seq}, ${event.id}, ${event.at}, ${event.account_id}, ${carriedType(event)}, ${target.kind},
        ${target.id}, ${target.ref}, ${event.actor_type}, ${event.actor_id}, ${event.request_id}, ${event.summary})`.execute(
      db,
    );
  }
  // The head is at least the last carried change; it never moves back (instances compare it).
  await sql`update data_generation set generation = ${seq} where id = 1 and generation < ${seq}`.execute(db);
}

interface AuditEvent {
  id: string;
  at: string;
  account_id: string;
  actor_type: string;
  actor_id: string | null;
  action: string;
  target: string;
  request_id: string | null;
  summary: string;
}

/**
 * The change type of a carried event. The audit trail wrote one event per publication; the log writes
 * one change per entity, so a publication is carried as what it did to the entity it named.
 */
function carriedType(event: AuditEvent): string {
  switch (event.action) {
    case 'catalog_version.published':
      return 'catalog.version_published';
    case 'catalog.published':
      return event.summary.includes('a catalog version published')
        ? 'catalog.version_published'
        : 'catalog.updated';
    case 'resource.published':
      return event.summary.startsWith('1 created') ? 'resource.created' : 'resource.version_published';
    default:
      return event.action;
  }
}

async function carriedTarget(
  db: Kysely<unknown>,
  event: AuditEvent,
): Promise<{ kind: string; id: string; ref: string | null }> {
  const [prefix, ...rest] = event.target.split(':');
  const name = rest.join(':');
  if (prefix === 'api-key') return { kind: 'api_key', id: name, ref: null };
  // `org/<catalog>` or `org/<catalog>/<resource>`: the account's own.
  const [, catalogSlug, resourceSlug] = name.split('/');
  const catalog = await sql<{ id: string }>`select id from catalogs
    where account_id = ${event.account_id} and slug = ${catalogSlug ?? ''}`.execute(db);
  const catalogId = catalog.rows[0]?.id;
  if (prefix === 'catalog') return { kind: 'catalog', id: catalogId ?? name, ref: name };
  const resource =
    catalogId === undefined
      ? undefined
      : (
          await sql<{ id: string }>`select id from resources
            where catalog_id = ${catalogId} and slug = ${resourceSlug ?? ''}`.execute(db)
        ).rows[0];
  return { kind: 'resource', id: resource?.id ?? name, ref: name };
}
