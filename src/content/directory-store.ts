import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { PRIVATE_DIRECTORY_MODE, PRIVATE_FILE_MODE } from '../foundation/private-files.js';
import { ContentNotFoundError, type ContentStore } from './content-store.js';

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
    try {
      return await fs.readFile(this.pathOf(hash), 'utf8');
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') throw new ContentNotFoundError(hash);
      throw error;
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
