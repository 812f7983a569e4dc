import fs from 'node:fs/promises';
import path from 'node:path';
import { isInside } from './folder-entries.js';

/** What reading a `contentFile` gave: its text, or why it cannot be used. */
export type ContentFileResult = { readonly content: string } | { readonly problem: string };

const strictUtf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/**
 * Reads the `contentFile` of a resource file. The path is relative to the catalog's `resources/`
 * folder and must stay inside the catalog folder, both as written and once symbolic links are
 * followed, so that a tree can never pull in files from elsewhere on the machine. The bytes must be
 * UTF-8 (D12 hashes the UTF-8 bytes; anything else could not round-trip). A byte order mark is kept,
 * so the stored content is exactly the file.
 *
 * @example
 * await readContentFile('/trees/demo/handbook', '/trees/demo/handbook', 'files/onboarding.md');
 * // { content: '# Onboarding\n…' }
 */
export async function readContentFile(
  catalogDir: string,
  catalogRealDir: string,
  contentFile: string,
  maxBytes = Number.POSITIVE_INFINITY,
): Promise<ContentFileResult> {
  if (contentFile.includes('\0')) return { problem: 'must not contain a NUL character' };
  if (path.posix.isAbsolute(contentFile) || path.win32.isAbsolute(contentFile)) {
    return { problem: 'must be a path relative to resources/, not an absolute path' };
  }
  const target = path.resolve(catalogDir, 'resources', contentFile);
  if (!isInside(catalogDir, target)) return { problem: 'must stay inside the catalog folder' };

  let real: string;
  try {
    real = await fs.realpath(target);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    return { problem: code === 'ENOENT' ? `no such file: ${contentFile}` : `cannot be read (${code})` };
  }
  if (!isInside(catalogRealDir, real)) {
    return { problem: 'leads outside the catalog folder through a symbolic link' };
  }

  let bytes: Buffer;
  try {
    const stat = await fs.stat(real);
    if (!stat.isFile()) return { problem: `is not a file: ${contentFile}` };
    // Refused before it is read: a file of gigabytes must not be loaded to be told it is too large.
    if (stat.size > maxBytes) return { problem: tooLarge(stat.size, maxBytes) };
    bytes = await fs.readFile(real);
  } catch (error) {
    return { problem: `cannot be read (${(error as NodeJS.ErrnoException).code})` };
  }
  try {
    return { content: strictUtf8.decode(bytes) };
  } catch {
    return { problem: `is not valid UTF-8: ${contentFile}` };
  }
}

/** D20's limit on the content of one Resource Version, in words. */
export function tooLarge(bytes: number, maxBytes: number): string {
  return `content is ${bytes} bytes; at most ${maxBytes} are accepted (PLAYBOOK_MAX_CONTENT_BYTES)`;
}
