import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Principal } from '../../src/auth/principal.js';
import * as repo from '../../src/catalog/read-repository.js';
import { DatabaseContentStore } from '../../src/content/database-store.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { seedCatalog, seedResource } from './support.js';

/**
 * D3 orders lists by slug, and the order must be the same on every backend: byte order, as SQLite
 * compares text. A PostgreSQL database with a locale-aware default would put `a-c` after `ab`; the
 * production project's cluster has such a default, so this suite fails there if byte order is lost.
 */

const slugs = ['ab', 'a-c', 'a-b', 'a0', 'b', 'a', 'a--b', 'z9', 'z-1', 'a9', 'a-9'];
/** JavaScript compares UTF-16 code units: byte order for ASCII. */
const byteOrder = [...slugs].sort();

const caller: Principal = {
  accountId: null,
  plan: 'free',
  scopes: new Set(['playbook:read']),
  credential: { kind: 'api-key', keyId: 'byte-order' },
  restrictions: null,
};

describe('slug order', () => {
  let backend: TestBackend;
  let catalogId: string;

  beforeAll(async () => {
    backend = await createTestBackend();
    const db = backend.databases.primary;
    const store = new DatabaseContentStore(db);
    // Inserted in neither order, so that insertion order cannot pass for either.
    for (const slug of [...slugs].reverse()) await seedCatalog(db, slug);
    catalogId = await seedCatalog(db, 'ordered');
    for (const slug of [...slugs].reverse()) await seedResource(db, catalogId, store, slug, `# ${slug}\n`);
  });
  afterAll(async () => {
    await backend?.cleanup();
  });
  const svcCatalog = () => ({ id: catalogId, account_id: null, slug: 'ordered' });

  it('lists Resources in byte order of their slugs', async () => {
    const positions = await repo.resourcePositions(backend.databases.reader, svcCatalog(), []);
    expect(positions.total).toBe(slugs.length);
    const rows = await repo.listResources(
      backend.databases.reader,
      svcCatalog(),
      [],
      { offset: 0, limit: 50 },
      positions,
    );
    expect(rows.map((row) => row.resource.slug)).toEqual(byteOrder);
  });

  it('lists Catalogs in byte order of their slugs', async () => {
    const rows = await repo.listCatalogs(backend.databases.reader, caller, {}, { offset: 0, limit: 50 });
    expect(rows.map((row) => row.catalog.slug)).toEqual([...byteOrder, 'ordered'].sort());
  });

  it.each([1, 2, 3, 5])(
    'walks pages without losing or repeating a slug at a page boundary, seeking from a mark every %i',
    async (every) => {
      const db = backend.databases.reader;
      const positions = await repo.resourcePositions(db, svcCatalog(), [], every);
      expect(positions.marks).toEqual(byteOrder.filter((_, index) => index % every === 0));
      for (const limit of [1, 3, 4]) {
        const seen: string[] = [];
        for (let offset = 0; offset < slugs.length; offset += limit) {
          const rows = await repo.listResources(db, svcCatalog(), [], { offset, limit }, positions);
          seen.push(...rows.map((row) => row.resource.slug));
        }
        expect(seen, `pages of ${limit}`).toEqual(byteOrder);
      }
    },
  );
});
