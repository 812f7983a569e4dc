import type { Kysely } from 'kysely';

/**
 * The sync feed (D27) reads the change log by entity: whether a Catalog or Resource changed again
 * later within a stretch of the log (so that it is sent once, at its last change), and whether a
 * Resource changed at all within one. Both look up one entity's changes by `seq`.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.createIndex('changes_target_seq').on('changes').columns(['target_id', 'seq']).execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropIndex('changes_target_seq').execute();
}
