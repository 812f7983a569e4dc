import { randomUUID } from 'node:crypto';
import type { Dirent } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import { type EntryKind, entryKind, isInside, realEntryProblem } from './folder-entries.js';

/** What writing a file did. */
export type Written = 'created' | 'updated' | 'unchanged';

/** A change the folder refuses: a path that would leave it, or a symbolic link where it writes or deletes. */
export class FolderRefusedError extends Error {
  override name = 'FolderRefusedError';
}

/**
 * Changes to one folder, made aside and applied together. Each file that changes is written into a
 * staging folder beside it (`.<name>.pull-<random>`, created exclusively, as is each file in it: `wx`,
 * random names), each deletion is noted, and nothing in the folder changes until `apply`, which checks
 * every path once more, renames the staged files into place, then deletes. `discard` (after any
 * failure) leaves the folder as it was, and removes the folders `begin` made for it.
 *
 * Every path stays strictly inside the folder; the folder, each folder below it that a change goes
 * through and each file written or deleted must be real: a symbolic link is refused, never followed
 * or replaced, as `import` and `publish` refuse it (folder-entries.ts).
 *
 * @example
 * const changes = await FolderChanges.begin('/trees/mirror/handbook', ['resources']);
 * await changes.write('catalog.json', text);
 * await changes.apply();
 */
export class FolderChanges {
  /** Each destination and its staged file, or undefined for a deletion; in the order they were made. */
  private readonly pending = new Map<string, string | undefined>();

  private constructor(
    readonly dir: string,
    private readonly staging: string,
    /** The first folder `begin` created on the way to the folder's parent, if it created any. */
    private readonly created: string | undefined,
  ) {}

  /**
   * Starts changes to `dir`, whose parent is made if missing. `dir` and each of `folders` (relative to
   * it) must be real folders or missing; anything else is refused before anything is written.
   */
  static async begin(dir: string, folders: readonly string[] = []): Promise<FolderChanges> {
    const parent = path.dirname(dir);
    const created = await fs.mkdir(parent, { recursive: true });
    try {
      for (const folder of ['', ...folders]) await checkFolder(dir, path.resolve(dir, folder));
      const staging = await fs.mkdtemp(path.join(parent, `.${path.basename(dir)}.pull-`));
      return new FolderChanges(dir, staging, created);
    } catch (error) {
      await removeEmptyFolders(parent, created);
      throw error;
    }
  }

  /** The bytes of a file of the folder as they are now; undefined when it is missing. */
  async read(relative: string): Promise<Buffer | undefined> {
    const file = this.pathOf(relative);
    return (await this.fileKind(file)) === 'file' ? fs.readFile(file) : undefined;
  }

  /**
   * Stages `text` as the file's UTF-8 bytes unless it holds exactly those; says what that does to the
   * file, and gives what it held before.
   */
  async write(relative: string, text: string): Promise<{ written: Written; before: Buffer | undefined }> {
    const file = this.pathOf(relative);
    const bytes = Buffer.from(text, 'utf8');
    const before = (await this.fileKind(file)) === 'file' ? await fs.readFile(file) : undefined;
    if (before?.equals(bytes)) {
      await this.replacePending(file, undefined, false);
      return { written: 'unchanged', before };
    }
    const staged = path.join(this.staging, randomUUID());
    await fs.writeFile(staged, bytes, { flag: 'wx' });
    await this.replacePending(file, staged, true);
    return { written: before === undefined ? 'created' : 'updated', before };
  }

  /** Notes a file to delete; whether there is one. */
  async delete(relative: string): Promise<boolean> {
    const file = this.pathOf(relative);
    const exists = (await this.fileKind(file)) === 'file';
    await this.replacePending(file, undefined, exists);
    return exists;
  }

  /** The entries of a folder of the folder; none when it is missing. */
  async list(relative: string): Promise<Dirent[]> {
    const folder = this.pathOf(relative);
    await checkFolder(this.dir, folder);
    try {
      return await fs.readdir(folder, { withFileTypes: true });
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw error;
    }
  }

  /**
   * Applies every change: every path is checked first, so that a refusal leaves the folder as it was;
   * then the folders needed are made, one level at a time, the staged files renamed into place and
   * the deletions made.
   */
  async apply(): Promise<void> {
    for (const [file, staged] of this.pending) {
      const kind = await this.fileKind(file);
      // A deletion of a file that is gone is done already.
      if (staged === undefined && kind === 'missing') this.pending.delete(file);
    }
    for (const [file, staged] of this.pending) {
      if (staged !== undefined) await this.makeFolder(path.dirname(file));
    }
    for (const [file, staged] of this.pending) {
      if (staged !== undefined) await fs.rename(staged, file);
    }
    for (const [file, staged] of this.pending) {
      if (staged === undefined) await fs.rm(file, { force: true });
    }
    this.pending.clear();
    await fs.rm(this.staging, { recursive: true, force: true });
  }

  /** Drops every change: the folder is left as it was. */
  async discard(): Promise<void> {
    this.pending.clear();
    await fs.rm(this.staging, { recursive: true, force: true });
    await removeEmptyFolders(path.dirname(this.dir), this.created);
  }

  /** The absolute path of a file of the folder, refused when it would leave the folder. */
  private pathOf(relative: string): string {
    const file = path.resolve(this.dir, relative);
    if (relative.includes('\0') || !isInside(this.dir, file)) {
      throw new FolderRefusedError(`${JSON.stringify(relative)}: leads outside ${this.name}`);
    }
    return file;
  }

  private get name(): string {
    return path.basename(this.dir);
  }

  /** What is at `file`, once every folder between the folder and it is checked; only a file or nothing is used. */
  private async fileKind(file: string): Promise<EntryKind> {
    for (let folder = path.dirname(file); isInside(this.dir, folder); folder = path.dirname(folder)) {
      await checkFolder(this.dir, folder);
    }
    await checkFolder(this.dir, this.dir);
    const kind = await entryKind(file);
    const problem = realEntryProblem(kind, 'file');
    if (problem) throw new FolderRefusedError(`${this.display(file)}: ${problem}`);
    return kind;
  }

  /** Makes a folder of the folder (or the folder itself) if missing, and checks it is a real one. */
  private async makeFolder(folder: string): Promise<void> {
    if (folder !== this.dir) await this.makeFolder(path.dirname(folder));
    await fs.mkdir(folder).catch((error: NodeJS.ErrnoException) => {
      if (error.code !== 'EEXIST') throw error;
    });
    await checkFolder(this.dir, folder);
  }

  /** Sets what happens to `file`, dropping a file staged for it before; `keep` false forgets it. */
  private async replacePending(file: string, staged: string | undefined, keep: boolean): Promise<void> {
    const before = this.pending.get(file);
    this.pending.delete(file);
    if (keep) this.pending.set(file, staged);
    if (before !== undefined) await fs.rm(before, { force: true });
  }

  private display(file: string): string {
    return path.join(this.name, path.relative(this.dir, file));
  }
}

/** Refuses `folder` (the folder changed, or one below it) unless it is a real folder or missing. */
async function checkFolder(dir: string, folder: string): Promise<void> {
  const problem = realEntryProblem(await entryKind(folder), 'folder');
  if (problem) {
    const name = path.join(path.basename(dir), path.relative(dir, folder));
    throw new FolderRefusedError(`${name}: ${problem}`);
  }
}

/** Removes the folders `mkdir -p` made, from `deepest` up to `created`, as long as each is empty. */
async function removeEmptyFolders(deepest: string, created: string | undefined): Promise<void> {
  if (created === undefined) return;
  for (let folder = deepest; ; folder = path.dirname(folder)) {
    const removed = await fs.rmdir(folder).then(
      () => true,
      () => false,
    );
    if (!removed || folder === created || path.dirname(folder) === folder) return;
  }
}
