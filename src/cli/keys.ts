import fs from 'node:fs/promises';
import path from 'node:path';
import type { Command } from 'commander';
import { byText } from '../foundation/text-order.js';
import { findApiKeys, KEY_ID_PATTERN } from '../schemas/api-key-format.js';
import type { ApiKey } from '../schemas/identity.js';
import { ACCOUNT_ID_PATTERN } from '../schemas/identity.js';
import { type CliContext, CommandError } from './context.js';
import { printable } from './printable.js';

const KEY_ID = new RegExp(KEY_ID_PATTERN);

function statusOf(key: ApiKey, now: number): string {
  if (key.revokedAt !== undefined) return 'revoked';
  if (key.expiresAt !== undefined && Date.parse(key.expiresAt) <= now) return 'expired';
  return 'active';
}

/**
 * `playbook keys list --account <accountId>` and `playbook keys revoke <keyId>` (D14), for operators.
 * The list never shows a secret: only the key id, which is the public part of the key string.
 *
 * @example
 * npx playbook keys list --account demo
 * npx playbook keys revoke 3fZk9QwPq0LmT2Ab
 * npx playbook keys scan .
 */
export function registerKeysCommand(program: Command, context: CliContext): void {
  const keys = program
    .command('keys')
    .description("list or revoke an account's API keys, or scan files for keys");

  keys
    .command('list')
    .description("list an account's API keys, one per line, tab-separated")
    .requiredOption('--account <accountId>', 'the account')
    .action(async (options: { account: string }, command: Command) => {
      if (!ACCOUNT_ID_PATTERN.test(options.account)) {
        command.error(`error: --account ${JSON.stringify(options.account)} is not an account id`);
      }
      const services = await context.openServices();
      try {
        const list = await services.identity.keys.list(options.account);
        const now = Date.now();
        const lines = [['id', 'status', 'environment', 'scopes', 'created', 'expires', 'last used', 'name']];
        for (const key of list) {
          lines.push([
            key.id,
            statusOf(key, now),
            key.environment,
            key.scopes.join(','),
            key.createdAt,
            key.expiresAt ?? '-',
            key.lastUsedAt ?? '-',
            // A name is free text: tabs, line breaks and terminal escapes are shown escaped.
            printable(key.name),
          ]);
        }
        context.stdout.write(`${lines.map((line) => line.join('\t')).join('\n')}\n`);
      } finally {
        await services.close();
      }
    });

  keys
    .command('revoke')
    .description('revoke an API key; running servers refuse it within a second')
    .argument('<keyId>', 'the key id (the part between the environment and the secret)')
    .action(async (keyId: string, _options: unknown, command: Command) => {
      if (!KEY_ID.test(keyId)) command.error(`error: ${JSON.stringify(keyId)} is not a key id`);
      const services = await context.openServices();
      try {
        const outcome = await services.identity.keys.revoke(keyId);
        if (outcome === 'not-found') throw new CommandError(`no API key ${keyId}`);
        context.stdout.write(
          outcome === 'revoked' ? `key ${keyId} revoked\n` : `key ${keyId} was already revoked\n`,
        );
      } finally {
        await services.close();
      }
    });

  keys
    .command('scan')
    .description(
      'find API keys in files, checking their checksums offline; exit 1 when one is found (D22). Folders are walked, but for .git and node_modules',
    )
    .argument('<path...>', 'files or folders')
    .action(async (paths: string[], _options: unknown, command: Command) => {
      let keysFound = 0;
      let lookAlikes = 0;
      for (const start of paths) {
        const stat = await fs.lstat(start).catch(() => null);
        if (!stat) command.error(`error: ${JSON.stringify(start)} does not exist`);
        for await (const file of filesUnder(start, stat!.isDirectory())) {
          // Keys are ASCII: read as Latin-1, any file (binary too) keeps every key byte for byte.
          const text = await fs.readFile(file, 'latin1');
          for (const found of findApiKeys(text)) {
            if (!found.parsed) {
              lookAlikes++;
              continue;
            }
            keysFound++;
            const { environment, keyId } = found.parsed;
            // The key id is public; the secret is never printed.
            context.stdout.write(
              `${printable(file)}:${found.line}:${found.column}: ${environment} API key ${keyId} (checksum holds)\n`,
            );
          }
        }
      }
      const ignored =
        lookAlikes === 0
          ? ''
          : `; ${lookAlikes} look-alike${lookAlikes === 1 ? '' : 's'} with a failing checksum ignored`;
      if (keysFound > 0) {
        throw new CommandError(
          `found ${keysFound} API key${keysFound === 1 ? '' : 's'}${ignored}: revoke ${keysFound === 1 ? 'it' : 'them'} (or roll) and remove ${keysFound === 1 ? 'it' : 'them'} from the files`,
        );
      }
      context.stdout.write(`no API keys found${ignored}\n`);
    });
}

/** Folders that hold other people's files or history, not the project's own. */
const SKIPPED = new Set(['.git', 'node_modules']);

/** Regular files at or under `start`; symbolic links are not followed. */
async function* filesUnder(start: string, isDirectory: boolean): AsyncGenerator<string> {
  if (!isDirectory) {
    yield start;
    return;
  }
  const entries = await fs.readdir(start, { withFileTypes: true });
  entries.sort(byText((entry) => entry.name));
  for (const entry of entries) {
    const child = path.join(start, entry.name);
    if (entry.isDirectory() && !SKIPPED.has(entry.name)) yield* filesUnder(child, true);
    else if (entry.isFile()) yield child;
  }
}
