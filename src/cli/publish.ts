import path from 'node:path';
import { type CatalogInput, PlaybookError } from '@playbook/client';
import type { Command } from 'commander';
import { readImportTree } from '../import/read-tree.js';
import { MAX_CONTENT_BYTES_CEILING } from '../schemas/playbook.js';
import { type CliContext, CommandError } from './context.js';
import {
  INSECURE_HTTP_OPTION,
  keyClient,
  type RemoteOptions,
  serviceTarget,
  URL_OPTION,
} from './service-client.js';

interface PublishCommandOptions extends RemoteOptions {
  readonly dryRun?: boolean;
}

type ResourceInput = CatalogInput['resources'][number];

/**
 * `playbook publish <catalogDir> [--url <baseUrl>] [--dry-run]` (D23, D29): PUTs one catalog folder
 * (the format of `playbook import`, D15) to the running service at `--url`, else `PLAYBOOK_URL`,
 * through the client library, with the key from `PLAYBOOK_API_KEY` (never a flag: flags end up in
 * shell histories and CI logs). Prints the change report; on a refusal, exits 1 with the problem's
 * detail.
 *
 * @example
 * PLAYBOOK_URL=https://playbook.example.com PLAYBOOK_API_KEY=svc_sk_live_… playbook publish catalogs/handbook
 */
export function registerPublishCommand(program: Command, context: CliContext): void {
  program
    .command('publish')
    .description('publish one catalog folder to a running service, as the account of PLAYBOOK_API_KEY')
    .argument('<catalogDir>', 'a catalog folder: catalog.json and resources/')
    .option(...URL_OPTION)
    .option(...INSECURE_HTTP_OPTION)
    .option('--dry-run', 'report what would change, write nothing')
    .action(async (catalogDir: string, options: PublishCommandOptions, command: Command) => {
      const target = serviceTarget(context, options, command);
      if (target === undefined) {
        command.error('error: give --url, or set PLAYBOOK_URL, to where the service is');
      }
      // Checked offline before anything is read or sent.
      const playbook = keyClient(context, target, command, 'playbook:write');
      const absolute = path.resolve(catalogDir);
      const slug = path.basename(absolute);
      const reading = await readImportTree(path.dirname(absolute), undefined, {
        only: slug,
        // The service applies its own limit and says so; the folder is not judged by this machine's.
        maxContentBytes: MAX_CONTENT_BYTES_CEILING,
      });
      if (!reading.ok) {
        for (const problem of reading.problems) context.stderr.write(`${problem}\n`);
        throw new CommandError(`publish refused: ${reading.problems.length} problem(s) in ${catalogDir}`);
      }
      const [catalog] = reading.tree.catalogs;
      if (!catalog) throw new CommandError(`${catalogDir}: is not a catalog folder`);
      const resources: ResourceInput[] = [];
      for (const resource of catalog.resources) {
        const { manifest, content } = await resource.source.read();
        resources.push({
          slug: resource.slug,
          kind: resource.kind,
          title: resource.title,
          version: resource.version,
          mediaType: resource.mediaType,
          status: resource.status,
          ...(resource.description === undefined ? {} : { description: resource.description }),
          ...(resource.facetsJson === undefined ? {} : { facets: JSON.parse(resource.facetsJson) }),
          manifest: JSON.parse(manifest),
          storageBackend: resource.storageBackend,
          content,
        });
      }
      const input: CatalogInput = {
        name: catalog.name,
        version: catalog.version,
        status: catalog.status,
        ...(catalog.description === undefined ? {} : { description: catalog.description }),
        ...(catalog.facets === undefined ? {} : { facets: catalog.facets }),
        resources,
      };

      try {
        const { data } = await playbook.catalogs.put(slug, input, { dryRun: options.dryRun === true });
        for (const line of data.lines) context.stdout.write(`${line}\n`);
        const { created, updated, superseded, archived, unchanged } = data.changes;
        context.stdout.write(
          `${data.dryRun ? 'dry run of ' : ''}org/${slug}: ${created} created, ${updated} updated, ` +
            `${superseded} superseded, ${archived} archived, ${unchanged} unchanged` +
            `${data.dryRun ? '; nothing was written' : ''}\n`,
        );
      } catch (error) {
        if (!(error instanceof PlaybookError)) throw error;
        for (const field of error.errors)
          context.stderr.write(`${field.in} ${field.name}: ${field.message}\n`);
        throw new CommandError(
          `publish failed: ${error.status || ''} ${error.code}: ${error.detail}`.replace('  ', ' '),
        );
      }
    });
}
