import fs from 'node:fs/promises';
import path from 'node:path';
import { DeleteObjectCommand, PutObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ContentReader } from '../../src/content/content-reader.js';
import { ContentNotFoundError, type ContentStore } from '../../src/content/content-store.js';
import { DatabaseContentStore } from '../../src/content/database-store.js';
import { DirectoryContentStore, READ_AT_ONCE_BYTES } from '../../src/content/directory-store.js';
import { sha256Hex } from '../../src/content/hash.js';
import { S3ContentStore } from '../../src/content/s3-store.js';
import { IntegrityError } from '../../src/foundation/errors.js';
import { createTestBackend, s3AdminClientFor, type TestBackend } from '../helpers/backend.js';

/**
 * The `ContentStore` contract, run against every store of the backend under test: the database store
 * (SQLite or PostgreSQL) and the object store (a local directory, or S3). Each store is paired with a
 * way to change what it holds behind its back, as a damaged disk or a hand-edited bucket would, so
 * that `ContentReader` can be shown to refuse what no longer matches its hash (D12).
 */

interface StoreUnderTest {
  readonly name: string;
  readonly store: ContentStore;
  /** Replaces the stored bytes of `hash`, or removes them (null), without going through `put`. */
  tamper(hash: string, body: string | null): Promise<void>;
}

function databaseStore(backend: TestBackend): StoreUnderTest {
  const db = backend.databases.primary;
  return {
    name: `database store (${backend.databases.dialect})`,
    store: new DatabaseContentStore(db),
    tamper: async (hash, body) => {
      if (body === null) await db.deleteFrom('content_blobs').where('content_hash', '=', hash).execute();
      else await db.updateTable('content_blobs').set({ body }).where('content_hash', '=', hash).execute();
    },
  };
}

function objectStore(backend: TestBackend, s3: S3Client | undefined): StoreUnderTest {
  const store = backend.objectStore;
  const location = backend.env.PLAYBOOK_CONTENT_STORE!;
  if (store instanceof S3ContentStore) {
    const bucket = new URL(location).host;
    return {
      name: 'S3 store',
      store,
      tamper: async (hash, body) => {
        const target = { Bucket: bucket, Key: store.keyOf(hash) };
        await s3!.send(
          body === null ? new DeleteObjectCommand(target) : new PutObjectCommand({ ...target, Body: body }),
        );
      },
    };
  }
  return directoryStore(store, location);
}

function directoryStore(store: ContentStore, root: string): StoreUnderTest {
  return {
    name: 'directory store',
    store,
    tamper: async (hash, body) => {
      const file = path.join(root, hash.slice(0, 2), hash);
      if (body === null) await fs.rm(file);
      else await fs.writeFile(file, body);
    },
  };
}

const samples: Record<string, string> = {
  ascii: '# Onboarding\n\nRead this first.\n',
  'multi-byte UTF-8': 'Grüße, 東京, emoji 🚀 and a combining é\n',
  empty: '',
  '1 MiB': 'abcdefghijklmnop'.repeat(64 * 1024),
};

let backend: TestBackend;
let s3: S3Client | undefined;
const stores: StoreUnderTest[] = [];

beforeAll(async () => {
  backend = await createTestBackend();
  if (backend.objectStore instanceof S3ContentStore) {
    s3 = s3AdminClientFor(backend);
  }
  stores.push(databaseStore(backend), objectStore(backend, s3));
});
afterAll(async () => {
  s3?.destroy();
  await backend?.cleanup();
});

/** Runs `body` for each store of the backend, naming the store in any failure. */
async function forEachStore(body: (subject: StoreUnderTest) => Promise<void>): Promise<void> {
  for (const subject of stores) {
    try {
      await body(subject);
    } catch (error) {
      if (error instanceof Error) error.message = `${subject.name}: ${error.message}`;
      throw error;
    }
  }
}

describe('ContentStore contract', () => {
  it('covers the database store and the object store of this backend', () => {
    const expected =
      backend.backendKind === 'production'
        ? ['database store (postgres)', 'S3 store']
        : ['database store (sqlite)', 'directory store'];
    expect(stores.map((s) => s.name)).toEqual(expected);
  });

  it.each(Object.entries(samples))('gives back %s content exactly as it was put', async (_name, text) => {
    await forEachStore(async ({ store }) => {
      const hash = sha256Hex(text);
      await store.put(hash, text);
      expect(await store.get(hash)).toBe(text);
    });
  });

  it('answers a hash it does not hold with ContentNotFoundError naming the hash', async () => {
    await forEachStore(async ({ store }) => {
      const hash = sha256Hex(`never stored in ${store.backend}`);
      const error = await store.get(hash).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(ContentNotFoundError);
      expect((error as ContentNotFoundError).hash).toBe(hash);
    });
  });

  it('treats a second put of the same content, and concurrent puts, as harmless', async () => {
    await forEachStore(async ({ store }) => {
      const text = `idempotent ${store.backend}`;
      const hash = sha256Hex(text);
      await store.put(hash, text);
      await store.put(hash, text);
      await Promise.all(Array.from({ length: 8 }, () => store.put(hash, text)));
      expect(await store.get(hash)).toBe(text);
    });
  });

  it('says whether a put stored the content now, and deletes it again (idempotently)', async () => {
    await forEachStore(async ({ store }) => {
      const text = `deleted again ${store.backend}`;
      const hash = sha256Hex(text);
      expect(await store.put(hash, text)).toBe(true);
      expect(await store.put(hash, text)).toBe(false);
      await store.delete(hash);
      await expect(store.get(hash)).rejects.toBeInstanceOf(ContentNotFoundError);
      await store.delete(hash);
      expect(await store.put(hash, text)).toBe(true);
      expect(await store.get(hash)).toBe(text);
    });
  });

  it('passes its readiness check', async () => {
    await forEachStore(async ({ store }) => {
      await expect(store.check()).resolves.toBeUndefined();
    });
  });
});

describe('ContentReader integrity on each store (D12)', () => {
  it('refuses content changed behind the store with IntegrityError, reports it, and never serves it', async () => {
    await forEachStore(async ({ store, tamper }) => {
      const original = `original content in ${store.backend}`;
      const hash = sha256Hex(original);
      await store.put(hash, original);
      await tamper(hash, `TAMPERED content in ${store.backend}`);
      const reports: { hash: string; actual: string }[] = [];
      const reader = new ContentReader([store], { onIntegrityError: (details) => reports.push(details) });
      for (let attempt = 0; attempt < 2; attempt++) {
        await expect(reader.read(store.backend, hash)).rejects.toBeInstanceOf(IntegrityError);
      }
      expect(reports).toHaveLength(2);
      expect(reports[0]!.hash).toBe(hash);
      expect(reports[0]!.actual).toBe(sha256Hex(`TAMPERED content in ${store.backend}`));
    });
  });

  it('serves intact content, and reports content that vanished as not found', async () => {
    await forEachStore(async ({ store, tamper }) => {
      const text = `content that vanishes from ${store.backend}`;
      const hash = sha256Hex(text);
      await store.put(hash, text);
      expect(await new ContentReader([store]).read(store.backend, hash)).toBe(text);
      await tamper(hash, null);
      await expect(new ContentReader([store]).read(store.backend, hash)).rejects.toBeInstanceOf(
        ContentNotFoundError,
      );
    });
  });
});

describe('DirectoryContentStore', () => {
  const root = () => path.join(backend.workDir, 'directory-store');

  async function leftovers(dir: string): Promise<string[]> {
    const entries = await fs.readdir(dir, { recursive: true });
    return entries.filter((entry) => entry.endsWith('.tmp'));
  }

  it('writes atomically: a reader during a write sees nothing or everything, and no temporary remains', async () => {
    const store = new DirectoryContentStore(root());
    const text = `${'x'.repeat(8 * 1024 * 1024)}end`;
    const hash = sha256Hex(text);
    let done = false;
    const writing = store.put(hash, text).finally(() => {
      done = true;
    });
    const seen: string[] = [];
    while (!done) {
      const got = await store.get(hash).catch((error: unknown) => {
        if (error instanceof ContentNotFoundError) return 'not found';
        throw error;
      });
      seen.push(got === 'not found' ? got : got === text ? 'complete' : `partial (${got.length} chars)`);
      await new Promise((resolve) => setImmediate(resolve));
    }
    await writing;
    expect(seen.filter((s) => s !== 'not found' && s !== 'complete')).toEqual([]);
    expect(await store.get(hash)).toBe(text);
    expect(await leftovers(root())).toEqual([]);
  });

  it('neither serves nor trips over a temporary file a crash left behind', async () => {
    const store = new DirectoryContentStore(root());
    const text = 'content whose first write was cut short';
    const hash = sha256Hex(text);
    await fs.mkdir(path.join(root(), hash.slice(0, 2)), { recursive: true });
    await fs.writeFile(path.join(root(), hash.slice(0, 2), `${hash}.abc123.tmp`), 'content who');
    await expect(store.get(hash)).rejects.toBeInstanceOf(ContentNotFoundError);
    await store.put(hash, text);
    expect(await store.get(hash)).toBe(text);
  });

  it('reads content of up to READ_AT_ONCE_BYTES at once, a larger one in the background, each whole (D30, D20)', async () => {
    const store = new DirectoryContentStore(root());
    // Multi-byte characters, the last of them ending exactly on the bound.
    const small = `${'é'.repeat(READ_AT_ONCE_BYTES / 2 - 2)}🙂`;
    const large = `${small}x`;
    expect(Buffer.byteLength(small)).toBe(READ_AT_ONCE_BYTES);
    for (const text of [small, large]) await store.put(sha256Hex(text), text);

    /** The text, and whether the event loop turned (ran a setImmediate callback) before it came. */
    const read = async (text: string) => {
      let turned = false;
      const turn = setImmediate(() => {
        turned = true;
      });
      const got = await store.get(sha256Hex(text));
      clearImmediate(turn);
      return { whole: got === text, turned };
    };
    expect(await read(small)).toEqual({ whole: true, turned: false });
    expect(await read(large)).toEqual({ whole: true, turned: true });
    await expect(store.get(sha256Hex('never stored'))).rejects.toBeInstanceOf(ContentNotFoundError);
  });

  it('refuses a key that is not a SHA-256 digest, so that no path escapes its directory', async () => {
    const store = new DirectoryContentStore(root());
    await expect(store.get('../../etc/passwd')).rejects.toThrow(/SHA-256/);
    await expect(store.put('../outside', 'x')).rejects.toThrow(/SHA-256/);
  });
});

describe('S3ContentStore keys and writes', () => {
  it('keeps content under <prefix>/sha256/<first two hex digits>/<hash>', async () => {
    const store = new S3ContentStore({ bucket: 'b', prefix: '/tenant/content/' });
    const hash = sha256Hex('key layout');
    expect(store.keyOf(hash)).toBe(`tenant/content/sha256/${hash.slice(0, 2)}/${hash}`);
    expect(new S3ContentStore({ bucket: 'b', prefix: '' }).keyOf(hash)).toBe(
      `sha256/${hash.slice(0, 2)}/${hash}`,
    );
    expect(() => store.keyOf('../x')).toThrow(/SHA-256/);
  });

  it('refuses to store content under a hash it does not have', async () => {
    const store = new S3ContentStore({ bucket: 'b', prefix: 'p' });
    await expect(store.put(sha256Hex('one text'), 'another text')).rejects.toThrow(/does not match/);
  });
});
