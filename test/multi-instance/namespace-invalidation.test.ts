import fs from 'node:fs/promises';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { main } from '../../src/cli/program.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { sleep } from '../helpers/wait.js';
import { type Instance, startInstance, storeKey, WITHIN_MS } from './support.js';

/**
 * D26: answers in memory are dropped by namespace. A write in one account drops, on every instance and
 * within a second, what that account's callers see, and nothing that only another account's see; a
 * service change drops what every caller sees. The writes come from `playbook import`, another
 * process on the same database, which the instances learn of through the change log's poll alone.
 */

class Discard extends Writable {
  override _write(_chunk: Buffer, _encoding: string, done: () => void): void {
    done();
  }
}

const RESOURCES = '/v3/playbook/catalogs/org/handbook/resources';
const CATALOGS = '/v3/playbook/catalogs?pageSize=100';

describe('answers dropped by namespace across instances (D26)', () => {
  let backend: TestBackend;
  let a: Instance;
  let b: Instance;
  let acme: string;
  let globex: string;

  /** `playbook import` of one Catalog of one Resource, at `version`, for an account or the service. */
  async function importCatalog(owner: string, version: string, slug = 'handbook'): Promise<void> {
    const tree = path.join(backend.workDir, `tree-${owner}-${slug}`);
    const folder = path.join(tree, slug);
    await fs.mkdir(path.join(folder, 'resources'), { recursive: true });
    await fs.writeFile(path.join(folder, 'catalog.json'), JSON.stringify({ name: 'Handbook', version }));
    await fs.writeFile(
      path.join(folder, 'resources', 'doc.json'),
      JSON.stringify({ kind: 'document', title: 'Doc', version, mediaType: 'text/plain', content: version }),
    );
    const target = owner === 'svc' ? ['--owner', 'svc'] : ['--account', owner];
    const code = await main(['node', 'playbook', 'import', tree, ...target], backend.env, {
      stdout: new Discard(),
      stderr: new Discard(),
    });
    expect(code).toBe(0);
  }

  const read = async (instance: Instance, key: string, url: string) => {
    const answer = await instance.app.inject({ url, headers: { 'x-api-key': key } });
    expect(answer.statusCode, answer.body).toBe(200);
    return answer.json() as {
      data: { slug: string; id: string; currentVersion?: { version: string; id: string } }[];
    };
  };

  /** Every read operation's URL for one Catalog's Resource: its list, detail, versions and version. */
  const everyRead = async (instance: Instance, key: string, catalog: string): Promise<string[]> => {
    const list = `/v3/playbook/catalogs/${catalog}/resources`;
    const resource = (await read(instance, key, list)).data[0]!;
    const detail = `/v3/playbook/resources/${resource.id}`;
    return [list, detail, `${detail}/versions`, `${detail}/versions/${resource.currentVersion!.id}`];
  };

  /**
   * Reads `urls` and says how many were answered from memory: one hit each at most (a read of an
   * account's Resource first looks for the service's answer, a miss that says nothing).
   */
  const heldOf = async (instance: Instance, key: string, urls: readonly string[]) => {
    const before = instance.services.answers.stats.hits;
    for (const url of urls) await read(instance, key, url);
    return instance.services.answers.stats.hits - before;
  };

  beforeAll(async () => {
    backend = await createTestBackend();
    await importCatalog('acme', '1');
    await importCatalog('globex', '1');
    await importCatalog('svc', '1', 'guide');
    a = await startInstance('A', backend, {});
    b = await startInstance('B', backend, {});
    acme = (await storeKey(a, 'acme')).key;
    globex = (await storeKey(a, 'globex')).key;
  });
  afterAll(async () => {
    await a?.close();
    await b?.close();
    await backend?.cleanup();
  });

  it("a write in account A shows to A's readers on every instance within a second, and B's and the service's answers stay held", async () => {
    const globexReads = [...(await everyRead(b, globex, 'org/handbook')), CATALOGS];
    const serviceReads = await everyRead(b, globex, 'svc/guide');
    for (const instance of [a, b]) {
      await read(instance, acme, RESOURCES);
      for (const url of [...globexReads, ...serviceReads]) await read(instance, globex, url);
      // Every change so far (the keys' among them) followed before counting.
      await instance.services.follower.check();
    }

    await importCatalog('acme', '2');
    const committedAt = performance.now();
    for (const instance of [a, b]) {
      while ((await read(instance, acme, RESOURCES)).data[0]?.currentVersion?.version !== '2') {
        expect(performance.now() - committedAt).toBeLessThan(WITHIN_MS);
        await sleep(20);
      }
    }
    expect(performance.now() - committedAt).toBeLessThan(WITHIN_MS);
    // Every answer of globex, and of the service, is still held: each read a hit.
    expect(await heldOf(b, globex, [...globexReads, ...serviceReads])).toBe(
      globexReads.length + serviceReads.length,
    );
  });

  it("a service change drops what every caller sees, and keeps what only one account's callers see", async () => {
    const globexReads = await everyRead(b, globex, 'org/handbook');
    const serviceReads = await everyRead(b, globex, 'svc/guide');
    for (const url of [...globexReads, ...serviceReads, CATALOGS]) await read(b, globex, url);
    await importCatalog('svc', '1');
    const committedAt = performance.now();
    const handbooks = async () =>
      (await read(b, globex, CATALOGS)).data.filter((catalog) => catalog.slug === 'handbook').length;
    // globex's own, then the service's beside it.
    while ((await handbooks()) < 2) {
      expect(performance.now() - committedAt).toBeLessThan(WITHIN_MS);
      await sleep(20);
    }
    expect(performance.now() - committedAt).toBeLessThan(WITHIN_MS);
    // The account's own answers stay; every answer made of the service's content is made again.
    expect(await heldOf(b, globex, globexReads)).toBe(globexReads.length);
    expect(await heldOf(b, globex, serviceReads)).toBe(0);
  });
});
