import type { Kysely } from 'kysely';

// API keys (D8). Dialect-neutral schema builder only (text, integer), so that it runs on SQLite and
// PostgreSQL alike. Neither the key string nor its secret is ever stored: only `secret_hash`.
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable('api_keys')
    // The public key id of the key string, so that a presented key is one primary-key lookup.
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('account_id', 'text', (c) => c.notNull().references('accounts.id'))
    .addColumn('name', 'text', (c) => c.notNull())
    // JSON array of scope names.
    .addColumn('scopes', 'text', (c) => c.notNull())
    .addColumn('environment', 'text', (c) => c.notNull())
    // Lowercase hex SHA-256 of the secret part of the key.
    .addColumn('secret_hash', 'text', (c) => c.notNull())
    // The `sub` of the access token that created the key.
    .addColumn('created_by', 'text', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('expires_at', 'text')
    .addColumn('revoked_at', 'text')
    .addColumn('last_used_at', 'text')
    .execute();
  // An account's keys in creation order, for the list operation.
  await db.schema
    .createIndex('api_keys_account_created')
    .on('api_keys')
    .columns(['account_id', 'created_at', 'id'])
    .execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropTable('api_keys').ifExists().execute();
}
