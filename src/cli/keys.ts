import type { Command } from 'commander';
import type { ApiKey } from '../schemas/identity.js';
import { ACCOUNT_ID_PATTERN, KEY_ID_PATTERN } from '../schemas/identity.js';
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
 */
export function registerKeysCommand(program: Command, context: CliContext): void {
  const keys = program.command('keys').description("list or revoke an account's API keys");

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
}
