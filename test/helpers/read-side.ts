import { AnswerCache } from '../../src/catalog/answer-cache.js';
import { advanceDataGeneration, DataGeneration } from '../../src/catalog/data-generation.js';
import { PlaybookService } from '../../src/catalog/playbook-service.js';
import type { ContentReader } from '../../src/content/content-reader.js';
import type { Db } from '../../src/db/tables.js';

/** Every read side a test has built and not closed: what `dataChanged` tells at once. */
const following = new Set<DataGeneration>();

export interface ReadSide {
  readonly playbook: PlaybookService;
  readonly answers: AnswerCache;
  readonly generation: DataGeneration;
  close(): void;
}

/**
 * The read path as `createServices` composes it: answers kept in memory, forgotten when the data
 * generation of `db` moves. Tests write data through fixtures, which call `dataChanged` as a real
 * writer would; the read side learns of it before the fixture returns.
 */
export async function readSide(
  db: Db,
  content: ContentReader,
  options: { answerCacheBytes?: number } = {},
): Promise<ReadSide> {
  const answers = new AnswerCache(options.answerCacheBytes ?? 64 * 1024 * 1024);
  const generation = new DataGeneration(db);
  generation.onChange(() => answers.clear());
  await generation.start();
  following.add(generation);
  return {
    playbook: new PlaybookService(db, content, answers),
    answers,
    generation,
    close: () => {
      generation.stop();
      following.delete(generation);
    },
  };
}

/**
 * What a writer of Catalog data does after its write: advance the data generation. Every read side
 * of the test process then reads the generation at once, rather than at its next poll.
 */
export async function dataChanged(db: Db): Promise<void> {
  await advanceDataGeneration(db);
  await Promise.all([...following].map((generation) => generation.check()));
}
