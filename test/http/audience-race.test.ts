import type { FastifyInstance } from 'fastify';
import type { KyselyPlugin } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../../src/composition/app.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { type GivenResource, givenAccount, givenCatalog, givenResource } from '../helpers/fixtures.js';
import { type ReadSide, readSide } from '../helpers/read-side.js';
import { sleep } from '../helpers/wait.js';

/**
 * D5 in memory: concurrent loads of one answer are shared only within one audience. An account whose
 * id is literally `null` reads its private Resource at the same moment as a user who selected no
 * account (a token for two accounts, no `x-account-id`); the second must get the 404 it gets alone,
 * never the owner's answer, round after round, with and without answers kept between rounds.
 */
describe('D5: a caller with no account never shares a load with the account "null"', () => {
  let backend: TestBackend;
  let identity: TestIdentity;
  let owner: Record<string, string>;
  let noAccount: Record<string, string>;
  let secret: GivenResource;

  /**
   * Reads that take a while, as on a busy database: the owner's load is still under way when the
   * other caller, whose token takes longer to check than a key held in memory, asks.
   */
  const slowReads: KyselyPlugin = {
    transformQuery: (args) => args.node,
    transformResult: async (args) => {
      await sleep(15);
      return args.result;
    },
  };

  async function appWith(answerCacheBytes: number): Promise<{ app: FastifyInstance; reads: ReadSide }> {
    const db = backend.databases.reader.withPlugin(slowReads);
    const reads = await readSide(db, backend.content, { answerCacheBytes });
    const app = await buildApp({
      reads: reads.answers,
      authenticator: identity.authenticator,
      rateLimits: identity.rateLimits,
      readiness: [],
    });
    app.addHook('onClose', async () => reads.close());
    await app.ready();
    return { app, reads };
  }

  beforeAll(async () => {
    backend = await createTestBackend();
    identity = createTestIdentity(backend, { env: { PLAYBOOK_RATE_LIMIT_MAX: '1000000' } });
    const db = backend.databases.primary;
    await givenAccount(db, 'null', 'free');
    await givenAccount(db, 'other', 'free');
    const privateCatalog = await givenCatalog(db, { accountId: 'null', slug: 'private' });
    secret = await givenResource(backend, privateCatalog, {
      slug: 'secret',
      versions: [{ version: '1.0.0', content: 'the account null alone may read this' }],
    });
    owner = (await identity.mintKey({ accountId: 'null', plan: 'free' })).headers;
    // A user of two accounts who selects none sees the service's content only (D9).
    noAccount = await identity.tokenHeaders({ accounts: ['null', 'other'] });
  });

  afterAll(async () => {
    await identity?.close();
    await backend?.cleanup();
  });

  async function race(app: FastifyInstance, url: string, rounds: number, beforeRound: () => void) {
    const shared: number[] = [];
    for (let round = 0; round < rounds; round++) {
      beforeRound();
      // Alternate who asks first, and ask twice each, so that either may start the load.
      const callers =
        round % 2 === 0 ? [owner, noAccount, owner, noAccount] : [noAccount, owner, noAccount, owner];
      const answers = await Promise.all(callers.map((headers) => app.inject({ url, headers })));
      answers.forEach((answer, index) => {
        if (callers[index] === owner) {
          expect(answer.statusCode).toBe(200);
        } else if (answer.statusCode !== 404 || answer.body.includes('"slug":"secret"')) {
          shared.push(round);
        }
      });
    }
    return shared;
  }

  const urls = () => [
    `/v3/playbook/resources/${secret.id}`,
    `/v3/playbook/resources/${secret.id}/versions`,
    `/v3/playbook/resources/${secret.id}/versions/${secret.versions[0]!.id}`,
  ];

  it('every answer cold (no memory for answers): 0 shared answers in many rounds', async () => {
    const { app } = await appWith(0);
    try {
      for (const url of urls()) expect(await race(app, url, 25, () => {})).toEqual([]);
    } finally {
      await app.close();
    }
  });

  it('answers kept, forgotten before each round: 0 shared answers, and none kept for the wrong audience', async () => {
    const { app, reads } = await appWith(64 * 1024 * 1024);
    try {
      for (const url of urls()) {
        expect(await race(app, url, 25, () => reads.cache.clear())).toEqual([]);
        // Whatever was kept by the last round, the caller with no account still sees nothing.
        expect((await app.inject({ url, headers: noAccount })).statusCode).toBe(404);
        expect((await app.inject({ url, headers: owner })).statusCode).toBe(200);
      }
    } finally {
      await app.close();
    }
  });
});
