import { type Owner, PlaybookError } from '@playbook/client';
import type { Command } from 'commander';
import { type CliContext, CommandError } from './context.js';
import { printable } from './printable.js';
import { INSECURE_HTTP_OPTION, keyClient, type RemoteOptions, serviceTarget } from './service-client.js';

/** Where `get` looks for the service when `PLAYBOOK_URL` is not set: `playbook serve`'s default. */
export const DEFAULT_SERVICE_URL = 'http://127.0.0.1:8080';

const REF = /^(svc|org)\/([^/]+)(?:\/([^/]+))?$/;

/**
 * `playbook get <owner>/<catalogSlug>[/<resourceSlug>]` (D29): one Catalog, or one Resource with its
 * current content, read from a running service through the client library and printed as JSON. The
 * service is `PLAYBOOK_URL` (the local default otherwise) and the key `PLAYBOOK_API_KEY` (never a flag:
 * flags end up in shell histories and CI logs). A refusal exits 1 with the problem's detail.
 *
 * @example
 * PLAYBOOK_API_KEY=svc_sk_test_… playbook get svc/handbook/intro
 */
export function registerGetCommand(program: Command, context: CliContext): void {
  program
    .command('get')
    .description('print one Catalog or one Resource of a running service as JSON, read with PLAYBOOK_API_KEY')
    .argument(
      '<ref>',
      'owner/catalogSlug, or owner/catalogSlug/resourceSlug; owner is svc or org (your account)',
    )
    .option(...INSECURE_HTTP_OPTION)
    .addHelpText(
      'after',
      '\nEnvironment:\n' +
        `  PLAYBOOK_URL      where the service is (default ${DEFAULT_SERVICE_URL})\n` +
        '  PLAYBOOK_API_KEY  an API key with the playbook:read scope\n\n' +
        'Examples:\n' +
        '  playbook get svc/handbook\n' +
        '  playbook get org/runbooks/restart\n',
    )
    .action(async (ref: string, options: RemoteOptions, command: Command) => {
      const match = REF.exec(ref);
      if (!match) {
        command.error(
          `error: ${printable(JSON.stringify(ref))} is not a ref: give owner/catalogSlug or owner/catalogSlug/resourceSlug, owner svc or org`,
        );
      }
      const [, owner, catalogSlug, resourceSlug] = match as unknown as [string, Owner, string, string?];
      // PLAYBOOK_URL only: `get` takes no --url.
      const target = serviceTarget(context, options, command, DEFAULT_SERVICE_URL);
      const url = new URL(target.baseUrl);
      const playbook = keyClient(context, target, command, 'playbook:read');

      try {
        const answer =
          resourceSlug === undefined
            ? await playbook.catalogs.get(owner, catalogSlug)
            : await playbook.resources.getByRef(owner, catalogSlug, resourceSlug);
        // Line breaks inside strings are escaped by JSON; a line of it holds no other break to keep.
        const lines = JSON.stringify(answer, null, 2).split('\n').map(printable);
        context.stdout.write(`${lines.join('\n')}\n`);
      } catch (error) {
        if (!(error instanceof PlaybookError)) throw error;
        for (const field of error.errors)
          context.stderr.write(`${field.in} ${field.name}: ${printable(field.message)}\n`);
        // The origin alone: a URL's user information or query is no one's to read in a terminal log.
        const where = error.status === 0 ? ` (PLAYBOOK_URL is ${url.origin})` : '';
        throw new CommandError(
          `get failed: ${error.status || ''} ${error.code}: ${printable(error.detail)}${where}`.replace(
            '  ',
            ' ',
          ),
        );
      }
    });
}
