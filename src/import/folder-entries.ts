import type { Dirent, Stats } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';

/**
 * What the entries of an import tree (D15) may be, for every door that reads or writes one: `import`
 * and `publish` reading it, `pull` writing it (D27). A symbolic link is never followed where a folder
 * or a file of the tree is expected, since it could lead anywhere on the machine; paths made from
 * names must stay below the folder they are made in.
 */

/** What a path names, its last component not followed: a symbolic link is itself, never its target. */
export type EntryKind = 'file' | 'folder' | 'symbolic link' | 'other' | 'missing';

/** The kind of a listed entry or of `lstat`'s answer. */
export function kindOf(entry: Dirent | Stats): Exclude<EntryKind, 'missing'> {
  if (entry.isSymbolicLink()) return 'symbolic link';
  if (entry.isDirectory()) return 'folder';
  if (entry.isFile()) return 'file';
  return 'other';
}

/** What is at `file` now, without following a symbolic link there. */
export async function entryKind(file: string): Promise<EntryKind> {
  try {
    return kindOf(await fs.lstat(file));
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return 'missing';
    throw error;
  }
}

/**
 * Why an entry cannot be used where a real `expected` is: a symbolic link (with `rule`, what the tree
 * requires instead), or a file where a folder belongs and the reverse. Undefined when it can be used,
 * or is missing.
 *
 * @example
 * realEntryProblem('symbolic link', 'folder'); // 'is a symbolic link; it must be a real folder'
 */
export function realEntryProblem(
  kind: EntryKind,
  expected: 'file' | 'folder',
  rule = `it must be a real ${expected}`,
): string | undefined {
  if (kind === 'missing' || kind === expected) return undefined;
  if (kind === 'symbolic link') return `is a symbolic link; ${rule}`;
  return expected === 'folder' ? 'must be a folder' : 'is not a file';
}

/** True when `candidate` is strictly below `folder` (the folder itself is not a file to read or write). */
export function isInside(folder: string, candidate: string): boolean {
  const relative = path.relative(folder, candidate);
  return (
    relative !== '' &&
    !relative.startsWith(`..${path.sep}`) &&
    relative !== '..' &&
    !path.isAbsolute(relative)
  );
}
