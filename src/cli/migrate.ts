import type { Command } from 'commander';
import { migrateToLatest } from '../db/migrate.js';
import type { CliContext } from './context.js';

/** `playbook migrate` (D14): brings the schema up to date and says what ran. */
export function registerMigrateCommand(program: Command, context: CliContext): void {
  program
    .command('migrate')
    .description('bring the database schema up to date')
    .action(async () => {
      const services = await context.openStorage({ migrate: false });
      try {
        const applied = await migrateToLatest(services.databases);
        context.stdout.write(
          applied.length === 0 ? 'schema is up to date\n' : `applied ${applied.join(', ')}\n`,
        );
      } finally {
        await services.close();
      }
    });
}
