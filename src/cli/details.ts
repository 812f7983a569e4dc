import type { Command } from 'commander';
import type { CliContext } from './context.js';

/**
 * `playbook details build` (D30): writes the stored details of what the change log names since they
 * were last written, and those the database lacks, to the end, and says how many. A serving instance
 * does the same by itself, off the request path; this is for an operator who wants them all written
 * before traffic comes (after a restore, or a load made past the service once its rows are deleted).
 */
export function registerDetailsCommand(program: Command, context: CliContext): void {
  const details = program
    .command('details')
    .description("the read model of Resources' details (each detail's answer, stored whole)");
  details
    .command('build')
    .description('write the stored details the database lacks or the change log names, then exit')
    .action(async () => {
      const services = await context.openServices();
      try {
        const written = await services.storedDetails.buildAll();
        context.stdout.write(`wrote ${written} stored detail${written === 1 ? '' : 's'}\n`);
      } finally {
        await services.close();
      }
    });
}
