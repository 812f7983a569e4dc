import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';

/**
 * Modes of everything the service writes under its data directory (D21): directories it creates are
 * `0700` and files `0600`, whatever the process's umask, so that the database, content and signing key
 * are readable by the service's own user only. Directories that already exist keep their mode: an
 * operator who chose one has a reason.
 */
export const PRIVATE_DIRECTORY_MODE = 0o700;
export const PRIVATE_FILE_MODE = 0o600;

/**
 * Creates a private file once, atomically: written in full under a temporary name (mode 0600), then
 * linked into place. A concurrent creator (the server and a command started together) loses the link
 * race and keeps the winner's file, so every process reads the same text afterwards.
 */
export async function createPrivateFileOnce(file: string, text: string): Promise<void> {
  await fs.mkdir(path.dirname(file), { recursive: true, mode: PRIVATE_DIRECTORY_MODE });
  const temporary = `${file}.${randomBytes(6).toString('hex')}.tmp`;
  await fs.writeFile(temporary, text, { mode: PRIVATE_FILE_MODE, flag: 'wx' });
  try {
    await fs.link(temporary, file);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
  } finally {
    await fs.rm(temporary, { force: true });
  }
}

/** The text of a private file, made by `create` when it does not exist yet (once, whoever races). */
export async function readOrCreatePrivateFile(file: string, create: () => Promise<string>): Promise<string> {
  try {
    return await fs.readFile(file, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
  await createPrivateFileOnce(file, await create());
  return fs.readFile(file, 'utf8');
}
