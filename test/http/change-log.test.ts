import fs from 'node:fs/promises';
import path from 'node:path';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { setAccount } from '../../src/accounts/accounts.js';
import { readChangesAfter, readHead } from '../../src/changes/change-log.js';
import { UnitOfWork, type WriteName } from '../../src/changes/unit-of-work.js';
import { ImportValidationError, importTree } from '../../src/import/import-tree.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { loggedChanges } from '../helpers/changes.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { givenAccount } from '../helpers/fixtures.js';
import { KeyList, LEAKS, newSigner, report, signed } from '../helpers/leak-reports.js';
import { publishedResource as resource } from '../helpers/publish-bodies.js';
import { dumpStorage } from '../import/support.js';

/**
 * D26: every write passes through one unit of work that appends its changes to the log in its own
 * transaction. On both stacks: concurrent writes of every kind end in decisions, never 500s; a write
 * that fails after its append leaves neither rows nor changes; the log's order is the commit order.
 */

const CATALOG = '/v3/playbook/catalogs/org/handbook';
const KEYS = '/v3/identity/api-keys';

/** What a write came to, over HTTP or from an operator's command. */
type Outcome = Pick<LightMyRequestResponse, 'statusCode' | 'body' | 'headers' | 'json'>;

/** What a decision is: the write done, or refused for a reason the caller can act on. */
const DECISIONS = new Set([200, 201, 204, 409, 412]);

/** The body of a one-Resource write: a published Resource without its slug, which the path names. */
function single(slug: string, overrides: Record<string, unknown> = {}) {
  const { slug: _slug, ...body } = resource(slug, overrides);
  return body;
}

describe('the change log and the one unit of work (D26)', () => {
  let backend: TestBackend;
  let identity: TestIdentity;
  let app: FastifyInstance;
  let writer: Record<string, string>;
  let token: Record<string, string>;
  /** What the next write does just before its commit, once its changes are appended. */
  let beforeCommit: ((write: WriteName) => void) | undefined;
  /** The partner program that reports leaked keys, and its signing key. */
  const keyList = new KeyList();
  const partner = newSigner('c0ffee');

  beforeAll(async () => {
    backend = await createTestBackend();
    keyList.listed = [partner];
    identity = createTestIdentity(backend, {
      beforeCommit: (write) => beforeCommit?.(write),
      env: { PLAYBOOK_LEAK_REPORT_KEYS_URL: await keyList.start() },
    });
    app = await buildIdentityApp(backend, identity);
    await givenAccount(backend.databases.primary, 'acme');
    writer = (await identity.mintKey({ accountId: 'acme', scopes: ['playbook:read', 'playbook:write'] }))
      .headers;
    token = await identity.tokenHeaders({ user: 'ada', accounts: ['acme'] });
    const created = await put(CATALOG, { name: 'Handbook', version: '1', resources: [resource('intro')] });
    expect(created.statusCode, created.body).toBe(201);
  });
  afterAll(async () => {
    await app.close();
    await identity.close();
    await backend.cleanup();
    await keyList.stop();
  });

  const put = (url: string, payload: unknown) =>
    app.inject({ method: 'PUT', url, headers: writer, payload: payload as Record<string, unknown> });
  const createKey = (headers: Record<string, string>, name: string, accountId = 'acme') =>
    app.inject({
      method: 'POST',
      url: KEYS,
      headers,
      payload: { name, accountId, scopes: ['playbook:read'] },
    });
  /** The partner program's report that `key` leaked, signed. */
  const reportLeak = (key: string) => {
    const body = report(key);
    return app.inject({ method: 'POST', url: LEAKS, headers: signed(body, partner), payload: body });
  };
  /** A folder `playbook import` reads: the Catalog `catalog` with one Resource of `content`. */
  const importFolder = async (name: string, catalog: string, content: string) => {
    const tree = path.join(backend.workDir, name);
    await fs.mkdir(path.join(tree, catalog, 'resources'), { recursive: true });
    await fs.writeFile(
      path.join(tree, catalog, 'catalog.json'),
      JSON.stringify({ name: `${catalog} (imported)`, version: 'imported' }),
    );
    await fs.writeFile(
      path.join(tree, catalog, 'resources', 'imported.json'),
      JSON.stringify({
        kind: 'document',
        title: 'Imported',
        version: '1',
        mediaType: 'text/markdown',
        content,
      }),
    );
    return tree;
  };
  const runImport = (tree: string) =>
    importTree(
      { db: backend.databases.primary, objectStore: backend.objectStore, writes: identity.writes },
      { dir: tree, owner: { kind: 'account', accountId: 'acme' }, dryRun: false },
    );
  /** Reads with `key`: 200 while it is usable. */
  const readWith = async (key: string) =>
    (await app.inject({ url: '/v3/playbook/catalogs', headers: { 'x-api-key': key } })).statusCode;

  it('22 concurrent writes of every kind to one Catalog: each answer a decision, none a 5xx, every change logged once', async () => {
    // Keys to roll, to revoke and to report leaked while the rest write, and an import tree of the
    // same Catalog.
    const toRoll = await Promise.all(
      [1, 2].map((n) => identity.mintKey({ accountId: 'acme', name: `roll ${n}` })),
    );
    const toRevoke = await Promise.all(
      [1, 2].map((n) => identity.mintKey({ accountId: 'acme', name: `revoke ${n}` })),
    );
    const leaked = await identity.mintKey({ accountId: 'acme', name: 'leaked' });
    const tree = await importFolder('concurrent-import', 'handbook', 'x');
    const before = await readHead(backend.databases.primary);
    /** An operator's write, outside HTTP: its outcome as the status a caller would see. */
    const operator = async (write: () => Promise<unknown>): Promise<Outcome> => {
      const outcome = (statusCode: number, body: string): Outcome => ({
        statusCode,
        body,
        headers: {},
        json: <T>() => ({}) as T,
      });
      try {
        await write();
        return outcome(200, '');
      } catch (error) {
        // A refusal the operator can act on (an import's plan refused) is a decision; anything else is not.
        return error instanceof ImportValidationError
          ? outcome(409, error.message)
          : outcome(500, String(error));
      }
    };
    const writes = Array.from({ length: 22 }, (_, i): Promise<Outcome> => {
      switch (i) {
        case 0:
        case 10:
          return put(CATALOG, {
            name: `Handbook ${i}`,
            version: `c${i}`,
            resources: [resource('intro'), resource(`from-catalog-${i}`)],
          });
        case 1:
        case 11:
          return put(`${CATALOG}/resources/extra-${i}`, single(`extra-${i}`));
        case 2:
        case 12:
          return app.inject({
            method: 'POST',
            url: `${CATALOG}/versions`,
            headers: writer,
            payload: { version: `p${i}` },
          });
        case 3:
        case 13:
          // The same version label for other content: one is stored, the other is 409 (or 200 once equal).
          return put(`${CATALOG}/resources/shared`, single('shared', { content: `shared ${i}` }));
        case 4:
          return app.inject({ method: 'DELETE', url: `${CATALOG}/resources/intro`, headers: writer });
        case 14:
          // The Catalog archived; the writes after it in the turn refuse or bring it back.
          return app.inject({ method: 'DELETE', url: CATALOG, headers: writer });
        case 5:
        case 15:
          return createKey(token, `concurrent ${i}`);
        case 6:
        case 16: {
          const key = toRoll[(i - 6) / 10]!;
          return app.inject({ method: 'POST', url: `${KEYS}/${key.id}/roll`, headers: token, payload: {} });
        }
        case 7:
        case 17: {
          const key = toRevoke[(i - 7) / 10]!;
          return app.inject({ method: 'DELETE', url: `${KEYS}/${key.id}`, headers: token });
        }
        case 8:
          return operator(() => setAccount(identity.writes, 'acme', { plan: 'pro' }));
        case 18:
          return operator(() => runImport(tree));
        case 20:
          return reportLeak(leaked.key);
        case 21:
          // An account set for the first time: created, in a namespace of its own.
          return operator(() => setAccount(identity.writes, 'newcomer', { plan: 'pro' }));
        default:
          return put(
            `${CATALOG}/resources/intro`,
            single('intro', { version: `i${i}`, content: `intro ${i}` }),
          );
      }
    });
    const answers = await Promise.all(writes);
    for (const answer of answers) {
      expect(DECISIONS.has(answer.statusCode), `${answer.statusCode} ${answer.body}`).toBe(true);
    }
    expect(answers.filter((answer) => answer.statusCode < 300).length).toBeGreaterThan(10);

    // Every change after `before` is numbered one after the other, in the order they committed.
    const changes = await readChangesAfter(backend.databases.primary, before, 10_000);
    expect(changes.map((change) => change.seq)).toEqual(changes.map((_, i) => before + i + 1));
    expect(await readHead(backend.databases.primary)).toBe(before + changes.length);
    // Each write that answered with a request id and changed something has its changes under it.
    const logged = (i: number) =>
      changes.filter((change) => change.requestId === answers[i]!.headers['x-request-id']);
    for (const i of [5, 15]) {
      expect(answers[i]!.statusCode).toBe(201);
      expect(logged(i).map((change) => change.type)).toEqual(['api_key.created']);
      expect(logged(i)[0]?.target).toEqual({ kind: 'api_key', id: answers[i]!.json().id });
    }
    for (const i of [6, 16]) {
      expect(answers[i]!.statusCode).toBe(201);
      expect(logged(i).map((change) => change.type)).toEqual(['api_key.rolled']);
    }
    for (const i of [7, 17]) {
      expect(answers[i]!.statusCode).toBe(204);
      expect(logged(i).map((change) => change.type)).toEqual(['api_key.revoked']);
    }
    expect(answers[20]!.statusCode, answers[20]!.body).toBe(200);
    expect(answers[20]!.json()).toEqual([expect.objectContaining({ label: 'true_positive' })]);
    expect(logged(20).map((change) => [change.type, change.target])).toEqual([
      ['api_key.leak_revoked', { kind: 'api_key', id: leaked.id }],
    ]);
    expect(await readWith(leaked.key)).toBe(401);
    // A refused write logged nothing; each write's changes follow one another, never another's between.
    for (const [i, answer] of answers.entries()) {
      const requestId = answer.headers['x-request-id'];
      if (requestId === undefined) continue;
      if (answer.statusCode >= 400) expect(logged(i), `${answer.statusCode} ${answer.body}`).toEqual([]);
      const seqs = logged(i).map((change) => change.seq);
      expect(seqs).toEqual(seqs.map((_, n) => seqs[0]! + n));
    }
    const types = new Set(changes.map((change) => change.type));
    expect(types).toContain('account.plan_changed');
    expect(types).toContain('catalog.archived');
    const created = changes.filter((change) => change.type === 'account.created');
    expect(created.map((change) => [change.namespace, change.target, change.actor])).toEqual([
      ['newcomer', { kind: 'account', id: 'newcomer' }, { type: 'operator' }],
    ]);
    for (const change of changes) {
      if (change.type !== 'account.created') expect(change.namespace).toBe('acme');
    }
  });

  it('a failure after the append and before the commit: no row, no change, no object left behind', async () => {
    const toRoll = await identity.mintKey({ accountId: 'acme', name: 'roll fails' });
    const toRevoke = await identity.mintKey({ accountId: 'acme', name: 'revocation fails' });
    const toReport = await identity.mintKey({ accountId: 'acme', name: 'leak revocation fails' });
    // Content above 64 KiB goes to object storage (D15): the failed import must take its object back.
    const tree = await importFolder('failing-import', 'imported-fails', 'y'.repeat(70 * 1024));
    /** An operator's write that fails: what a caller of the command line sees, as a status. */
    const failing = async (write: () => Promise<unknown>) => {
      await expect(write()).rejects.toThrow('injected');
      return { statusCode: 500, body: '' };
    };
    const before = await dumpStorage(backend);
    for (const [write, request] of [
      [
        'publish-catalog',
        () => put(CATALOG, { name: 'Fails', version: 'f1', resources: [resource('failing')] }),
      ],
      ['publish-resource', () => put(`${CATALOG}/resources/failing`, single('failing'))],
      [
        'publish-version',
        () =>
          app.inject({
            method: 'POST',
            url: `${CATALOG}/versions`,
            headers: writer,
            payload: { version: 'f2' },
          }),
      ],
      [
        'archive',
        () => app.inject({ method: 'DELETE', url: `${CATALOG}/resources/shared`, headers: writer }),
      ],
      ['import', () => failing(() => runImport(tree))],
      [
        'key-roll',
        () => app.inject({ method: 'POST', url: `${KEYS}/${toRoll.id}/roll`, headers: token, payload: {} }),
      ],
      ['key-revoke', () => app.inject({ method: 'DELETE', url: `${KEYS}/${toRevoke.id}`, headers: token })],
      ['key-revoke', () => reportLeak(toReport.key)],
      ['account-set', () => failing(() => setAccount(identity.writes, 'never-set', { plan: 'pro' }))],
      ['account-set', () => failing(() => setAccount(identity.writes, 'acme', { plan: 'enterprise' }))],
    ] as const) {
      const seen: WriteName[] = [];
      beforeCommit = (name) => {
        seen.push(name);
        throw new Error('injected: the database went away before the commit');
      };
      try {
        const answer = await request();
        expect(answer.statusCode, write).toBe(500);
      } finally {
        beforeCommit = undefined;
      }
      expect(seen).toEqual([write]);
    }
    expect(await dumpStorage(backend)).toEqual(before);
    // Nothing in memory took the failed writes for done either: each key works as it did.
    for (const key of [toRoll, toRevoke, toReport]) expect(await readWith(key.key)).toBe(200);
  });

  it('a key creation whose change cannot be written leaves no key, usable or listed', async () => {
    const before = await dumpStorage(backend);
    beforeCommit = () => {
      throw new Error('injected: the change log cannot be written');
    };
    try {
      const answer = await createKey(token, 'never');
      expect(answer.statusCode).toBe(500);
      // The key string is never answered for a key that was not stored.
      expect(answer.body).not.toMatch(/svc_sk_/);
    } finally {
      beforeCommit = undefined;
    }
    expect(await dumpStorage(backend)).toEqual(before);
    const listed = await app.inject({ url: `${KEYS}?accountId=acme&pageSize=100`, headers: token });
    expect((listed.json().data as { name: string }[]).map((key) => key.name)).not.toContain('never');
  });

  it('a write that meets conflicts on every attempt answers 503 unavailable with Retry-After, never 500', async () => {
    const before = await dumpStorage(backend);
    let attempts = 0;
    beforeCommit = () => {
      attempts++;
      // What a conflicting writer makes a transaction fail with: PostgreSQL's serialization failure.
      throw Object.assign(new Error('could not serialize access'), { code: '40001' });
    };
    try {
      const answer = await put(`${CATALOG}/resources/contended`, single('contended'));
      expect(answer.statusCode).toBe(503);
      expect(answer.headers['retry-after']).toBe('1');
      expect(answer.json()).toMatchObject({ code: 'unavailable' });
      expect(answer.json().detail).toMatch(/nothing was written/);
    } finally {
      beforeCommit = undefined;
    }
    expect(attempts).toBe(6);
    expect(await dumpStorage(backend)).toEqual(before);
    // One conflict, then the commit: the write is done, once.
    let conflicts = 1;
    beforeCommit = () => {
      if (conflicts-- > 0) throw Object.assign(new Error('deadlock detected'), { code: '40P01' });
    };
    try {
      const answer = await put(`${CATALOG}/resources/contended`, single('contended'));
      expect(answer.statusCode).toBe(201);
    } finally {
      beforeCommit = undefined;
    }
    const created = (await loggedChanges(backend.databases.primary, 'acme')).filter(
      (change) => change.target.humanRef === 'org/handbook/contended',
    );
    expect(created.map((change) => change.type)).toEqual(['resource.created']);
  });

  it('the ETag a write answers with is of that write: two writes at once answer two ETags, the later one current', async () => {
    const [first, second] = await Promise.all([
      put(`${CATALOG}/resources/etag-race`, single('etag-race', { version: 'e1', content: 'one' })),
      put(`${CATALOG}/resources/etag-race`, single('etag-race', { version: 'e2', content: 'two' })),
    ]);
    expect([first.statusCode, second.statusCode].sort()).toEqual([200, 201]);
    expect(first.headers.etag).not.toBe(second.headers.etag);
    // Whichever committed last holds the current ETag; the other's is stale.
    const [earlier, later] = first.statusCode === 201 ? [first, second] : [second, first];
    const guarded = (etag: string) =>
      app.inject({
        method: 'PUT',
        url: `${CATALOG}/resources/etag-race`,
        headers: { ...writer, 'if-match': etag },
        payload: single('etag-race', { version: 'e3', content: 'three' }),
      });
    expect((await guarded(String(earlier.headers.etag))).statusCode).toBe(412);
    expect((await guarded(String(later.headers.etag))).statusCode).toBe(200);
  });

  it('svc is no account: a key for it and its audit list are 400s, and a token naming it acts for none', async () => {
    const svcToken = await identity.tokenHeaders({ user: 'eve', accounts: ['svc'] });
    const key = await createKey(svcToken, 'service', 'svc');
    expect(key.statusCode).toBe(400);
    expect(key.json().errors).toEqual([expect.objectContaining({ in: 'body', name: 'accountId' })]);
    const audit = await app.inject({ url: '/v3/identity/audit-events?accountId=svc', headers: svcToken });
    expect(audit.statusCode).toBe(400);
    // The service's changes are in the log under svc; no account's list shows them.
    const mine = await app.inject({
      url: '/v3/identity/audit-events?accountId=acme&pageSize=100',
      headers: token,
    });
    expect((mine.json().data as { accountId: string }[]).every((event) => event.accountId === 'acme')).toBe(
      true,
    );
  });

  it('a follower reading by seq while writers commit sees every change once, in commit order', async () => {
    const db = backend.databases.primary;
    const start = await readHead(db);
    // Writers of their own (another process's unit of work) and through the API, at once.
    const other = new UnitOfWork(db);
    const seen: number[] = [];
    let following = true;
    const follower = (async () => {
      let after = start;
      while (following || after < (await readHead(db))) {
        for (const change of await readChangesAfter(backend.databases.reader, after, 50)) {
          seen.push(change.seq);
          after = change.seq;
        }
        await new Promise((resolve) => setImmediate(resolve));
      }
    })();
    const writers = Array.from({ length: 12 }, (_, i) =>
      i % 2 === 0
        ? put(`${CATALOG}/resources/followed-${i}`, single(`followed-${i}`))
        : other.run('account-set', { actor: { type: 'operator' } }, async (write) => {
            await write.db
              .insertInto('accounts')
              .values({ id: `followed-${i}`, name: null, plan: 'free', created_at: 'x', updated_at: 'x' })
              .execute();
            await write.append([
              {
                namespace: `followed-${i}`,
                type: 'account.created',
                target: { kind: 'account', id: `followed-${i}` },
                summary: 'made by a follower test',
              },
            ]);
          }),
    );
    await Promise.all(writers);
    following = false;
    await follower;
    const end = await readHead(db);
    expect(end - start).toBeGreaterThanOrEqual(12);
    expect(seen).toEqual(Array.from({ length: end - start }, (_, i) => start + i + 1));
  });
});
