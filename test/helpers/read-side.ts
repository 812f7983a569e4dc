import { sql } from 'kysely';
import { AnswerCache } from '../../src/answers/answer-cache.js';
import { ReadAnswers } from '../../src/answers/read-answers.js';
import { PlaybookService } from '../../src/catalog/playbook-service.js';
import { ChangeFollower } from '../../src/changes/change-follower.js';
import type { ContentReader } from '../../src/content/content-reader.js';
import type { ReadNow } from '../../src/db/create-db.js';
import type { Db } from '../../src/db/tables.js';
import type { Metrics } from '../../src/observability/metrics.js';

/** Every read side a test has built and not closed: what `dataChanged` and `followNow` tell at once. */
const following = new Set<ChangeFollower>();

export interface ReadSide {
  readonly playbook: PlaybookService;
  /** The read operations' answers, as the routes take them. */
  readonly answers: ReadAnswers;
  readonly cache: AnswerCache;
  readonly follower: ChangeFollower;
  close(): void;
}

/**
 * The read path as `createServices` composes it: answers kept in memory, dropped by what the change
 * log of `db` says changed. Writes through the unit of work announce to every read side of the test
 * process (`followNow`); fixtures that write straight to the tables call `dataChanged`.
 */
export async function readSide(
  db: Db,
  content: ContentReader,
  options: {
    answerCacheBytes?: number;
    metrics?: Metrics;
    /** Where stored details may be searched at once (`Databases.readNow`): nowhere unless given. */
    readNow?: ReadNow;
  } = {},
): Promise<ReadSide> {
  const cache = new AnswerCache(options.answerCacheBytes ?? 64 * 1024 * 1024, options.metrics);
  const follower = new ChangeFollower(db);
  follower.onChange((followed) => cache.follow(followed));
  await follower.start();
  following.add(follower);
  const playbook = new PlaybookService(db, content, options.readNow);
  return {
    playbook,
    answers: new ReadAnswers(playbook, cache),
    cache,
    follower,
    close: () => {
      follower.stop();
      following.delete(follower);
    },
  };
}

/** Every read side of the test process reads the change log now, rather than at its next poll. */
export async function followNow(): Promise<void> {
  await Promise.all([...following].map((follower) => follower.check()));
}

/**
 * What a fixture does after writing straight to the tables, past the change log: it moves the log's
 * head without a change, which tells every follower that it cannot say what changed, so each drops
 * every answer it holds (as after a write of a process that predates the log). It deletes every stored
 * detail, as a write deletes those of what it changes.
 */
export async function dataChanged(db: Db): Promise<void> {
  // What a write forgets in its transaction (D30): the stored details of what it changed, here all.
  await db.deleteFrom('stored_details').execute();
  await sql`update data_generation set generation = generation + 1 where id = 1`.execute(db);
  await followNow();
}
