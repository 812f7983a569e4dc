import fs from 'node:fs/promises';
import path from 'node:path';

/**
 * Everything under `dir`, by path relative to it: a folder as `folder`, a symbolic link as where it
 * points (never followed), a file as its text. Two snapshots are equal when nothing was written,
 * removed or replaced in between.
 *
 * @example
 * const before = await folderSnapshot(root);
 * await runCli(['pull', 'org/handbook', tree], env);
 * expect(await folderSnapshot(root)).toEqual(before);
 */
export async function folderSnapshot(dir: string): Promise<Record<string, string>> {
  const snapshot: Record<string, string> = {};
  const entries = await fs.readdir(dir, { recursive: true, withFileTypes: true }).catch(() => []);
  for (const entry of entries) {
    const absolute = path.join(entry.parentPath, entry.name);
    const relative = path.relative(dir, absolute).split(path.sep).join('/');
    if (entry.isSymbolicLink()) snapshot[relative] = `link to ${await fs.readlink(absolute)}`;
    else if (entry.isDirectory()) snapshot[relative] = 'folder';
    else snapshot[relative] = `file: ${await fs.readFile(absolute, 'utf8')}`;
  }
  return snapshot;
}
