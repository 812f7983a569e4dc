import type { Command } from 'commander';
import { setAccount } from '../accounts/accounts.js';
import { SLUG_REGEX } from '../schemas/common.js';
import { type CliContext, CommandError } from './context.js';

/** `playbook accounts set <accountId> [--name <text>] [--plan <slug>]` (D14). */
export function registerAccountsCommand(program: Command, context: CliContext): void {
  const accounts = program.command('accounts').description('manage accounts and their plans');
  accounts
    .command('set')
    .description('create an account, or update its name or plan')
    .argument('<accountId>', 'account id')
    .option('--name <text>', 'display name')
    .option('--plan <slug>', 'plan slug (default for a new account: free)')
    .action(async (accountId: string, options: { name?: string; plan?: string }) => {
      if (options.plan !== undefined && !SLUG_REGEX.test(options.plan)) {
        throw new CommandError(`--plan ${JSON.stringify(options.plan)} is not a slug`);
      }
      const services = await context.openStorage();
      try {
        const account = await setAccount(services.writes, accountId, options);
        context.stdout.write(
          `account ${account.id} (plan ${account.plan}) ${account.created ? 'created' : 'updated'}\n`,
        );
      } finally {
        await services.close();
      }
    });
}
