import { type ColumnDefinitionBuilder, type Kysely, sql } from 'kysely';
import type { Dialect } from '../tables.js';

/**
 * D30: the read model of a Resource's detail, `stored_details`. Each row is the answer of one
 * Resource's detail as the service sends it (its text and version tag) with what a read must decide
 * from it alone: whose the Resource is (the Catalog's account, null for the service's) and its facets
 * (the plan gate, D6). A read not answered from memory then costs one search instead of five.
 *
 * On SQLite a row is found through the unique index on the Resource's id, then by its rowid (`n`), so
 * that a row of a few kilobytes lies in one page (a table keyed by the id itself spills such rows onto
 * overflow pages). Rows are written by the service as it follows the change log (catalog/
 * stored-details.ts); every write deletes the rows of what it changes in its own transaction
 * (changes/forget-details.ts). The table starts empty: the service fills it.
 */
export async function up(db: Kysely<unknown>, dialect: Dialect): Promise<void> {
  const text = (column: ColumnDefinitionBuilder) =>
    dialect === 'postgres' ? column.modifyFront(sql`collate "C"`) : column;
  let table = db.schema.createTable('stored_details');
  table =
    dialect === 'sqlite'
      ? table
          .addColumn('n', 'integer', (c) => c.primaryKey())
          .addColumn('resource_id', 'text', (c) => c.notNull().unique())
      : table.addColumn('resource_id', 'text', (c) => text(c).primaryKey());
  await table
    .addColumn('catalog_id', 'text', (c) => text(c).notNull())
    .addColumn('account_id', 'text', (c) => text(c))
    .addColumn('facets', 'text', (c) => text(c))
    // What the service's answers are written as: a row of another form is not sent, and is rewritten.
    .addColumn('form', 'text', (c) => text(c).notNull())
    .addColumn('tag', 'text', (c) => text(c).notNull())
    .addColumn('body', 'text', (c) => text(c).notNull())
    .execute();
  // A write to a Catalog forgets the details of all its Resources.
  await db.schema.createIndex('stored_details_catalog').on('stored_details').column('catalog_id').execute();
  // How far the service has written the rows of what the log names: the next start reads on from
  // there. The table starts empty, so nothing before the log's head now needs writing again.
  await db.schema
    .createTable('stored_details_followed')
    .addColumn('id', 'integer', (c) => c.primaryKey())
    .addColumn('seq', dialect === 'postgres' ? 'bigint' : 'integer', (c) => c.notNull())
    .execute();
  await sql`insert into stored_details_followed (id, seq)
    select 1, generation from data_generation where id = 1`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropTable('stored_details_followed').execute();
  await db.schema.dropTable('stored_details').execute();
}
