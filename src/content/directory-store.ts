import { randomBytes } from 'node:crypto';
import { closeSync, fstatSync, openSync, readFile as readFileCallback, readSync } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { PRIVATE_DIRECTORY_MODE, PRIVATE_FILE_MODE } from '../foundation/private-files.js';
import { ContentNotFoundError, type ContentStore } from './content-store.js';

/**
 * Content up to this size is read from its file at once, on the event loop's thread (D30): a few
 * system calls on a file of the page cache, tens of microseconds. Read in the background instead, it
 * took four turns of the event loop (open, stat, read, close), each behind every other request of its
 * turn, and a thread's help each time: cold reads over a million Resources ran a quarter slower. A
 * larger file is read in the background, so that no read of one holds the others up (D20).
 */
export const READ_AT_ONCE_BYTES = 64 * 1024;

/** A file read in the background through a descriptor already open (the promise API takes a handle). */
const readInBackground = promisify(readFileCallback);

/**
 * The embedded object store: one file per content hash under a local directory, fanned out by the
 * hash's first two characters. Files are written to a temporary name, flushed, then renamed, so a
 * reader never sees a partial file and a crash leaves at worst an unreferenced temporary.
 */
export class DirectoryContentStore implements ContentStore {
  readonly backend = 'object-storage' as const;

  constructor(private readonly root: string) {}

  private pathOf(hash: string): string {
    if (!/^[0-9a-f]{64}$/.test(hash)) throw new Error('content keys are SHA-256 hex digests');
    return path.join(this.root, hash.slice(0, 2), hash);
  }

  async put(hash: string, content: string): Promise<boolean> {
    const target = this.pathOf(hash);
    if (await exists(target)) return false;
    await fs.mkdir(path.dirname(target), { recursive: true, mode: PRIVATE_DIRECTORY_MODE });
    const temporary = `${target}.${randomBytes(6).toString('hex')}.tmp`;
    const handle = await fs.open(temporary, 'wx', PRIVATE_FILE_MODE);
    try {
      await handle.writeFile(content, 'utf8');
      await handle.sync();
    } finally {
      await handle.close();
    }
    await fs.rename(temporary, target);
    return true;
  }

  async delete(hash: string): Promise<void> {
    await fs.rm(this.pathOf(hash), { force: true });
  }

  async get(hash: string): Promise<string> {
    let descriptor: number;
    try {
      descriptor = openSync(this.pathOf(hash), 'r');
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') throw new ContentNotFoundError(hash);
      throw error;
    }
    try {
      const { size } = fstatSync(descriptor);
      return size <= READ_AT_ONCE_BYTES
        ? readAtOnce(descriptor, size)
        : await readInBackground(descriptor, 'utf8');
    } finally {
      closeSync(descriptor);
    }
  }

  async check(): Promise<void> {
    await fs.mkdir(this.root, { recursive: true, mode: PRIVATE_DIRECTORY_MODE });
    await fs.access(this.root, fs.constants.R_OK | fs.constants.W_OK);
  }
}

async function exists(file: string): Promise<boolean> {
  try {
    await fs.access(file);
    return true;
  } catch {
    return false;
  }
}

/** The text of the open file `descriptor`, of `size` bytes, read on this thread. */
function readAtOnce(descriptor: number, size: number): string {
  const bytes = Buffer.allocUnsafe(size);
  let read = 0;
  while (read < size) {
    const got = readSync(descriptor, bytes, read, size - read, read);
    if (got === 0) break;
    read += got;
  }
  return bytes.toString('utf8', 0, read);
}
