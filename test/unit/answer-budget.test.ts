import v8 from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import { AnswerCache } from '../../src/answers/answer-cache.js';
import { answerKey } from '../../src/answers/answer-keys.js';
import { Answer } from '../../src/http/answer.js';
import { sleep } from '../helpers/wait.js';

/** A Resource detail's JSON of about 2 KB, different for each `i`, as a cold read keeps them. */
function detailText(i: number): string {
  return JSON.stringify({
    id: `01940000-0000-7001-8000-${String(i).padStart(12, '0')}`,
    slug: `incident-response-${i}`,
    title: `Incident response ${i}`,
    description: 'What to do first when something breaks, and who to tell.',
    content: Array.from({ length: 30 }, (_, step) => `Step ${step} of ${i}: check the ${step}th thing.`).join(
      '\n',
    ),
  });
}

/**
 * D30: memory is bounded by configuration. The answers' budget (`PLAYBOOK_ANSWER_CACHE_BYTES`) bounds
 * what the answers kept in memory hold, their objects and keys as well as their bytes: a budget full of
 * small details holds about what it says, in and outside the heap.
 */
describe('the answers budget bounds what kept answers hold (D30)', () => {
  it('a budget of 8 MiB full of details, each with its br form, holds at most 8.8 MiB more than none', async () => {
    v8.setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    // Native memory let go by a collection (a compressor's) is given back a turn later.
    const held = async () => {
      gc();
      await sleep(100);
      gc();
      const { heapUsed, external } = process.memoryUsage();
      return heapUsed + external;
    };
    const budget = 8 * 1024 * 1024;
    const cache = new AnswerCache(budget);
    const before = await held();
    // Twice what fits: the budget is full, and the first half has been let go.
    for (let i = 0; i < 6000; i++) {
      const key = answerKey(
        'resource',
        { kind: 'account', accountId: `account-${i % 1000}` },
        detailText(i).slice(7, 43),
      );
      const answer = Answer.json(detailText(i));
      await answer.encoded('br');
      cache.set(key, answer, cache.ticket(), [`account-${i % 1000}`]);
    }
    const added = (await held()) - before;
    console.log(
      `kept ${cache.stats.entries} answers counted as ${(cache.stats.bytes / 1048576).toFixed(2)} MiB; they hold ${(added / 1048576).toFixed(2)} MiB`,
    );
    expect(cache.stats.bytes).toBeGreaterThan(budget * 0.95);
    expect(added).toBeLessThan(budget * 1.1);
  });
});
