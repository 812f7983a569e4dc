import path from 'node:path';
import {
  type Catalog,
  type Owner,
  type Playbook,
  PlaybookError,
  type Resource,
  type ResourceListItem,
  type SyncItem,
} from '@playbook/client';
import type { Command } from 'commander';
import { mapWithLimit } from '../db/batches.js';
import { CatalogFolder, type FolderResource, type Written } from '../import/catalog-folder.js';
import { stopped } from './audit.js';
import { type CliContext, CommandError } from './context.js';
import { DEFAULT_SERVICE_URL } from './get.js';
import { printable } from './printable.js';
import {
  callFailed,
  INSECURE_HTTP_OPTION,
  keyClient,
  type RemoteOptions,
  serviceTarget,
  URL_OPTION,
} from './service-client.js';

const REF = /^(svc|org)\/([a-z0-9]+(?:-[a-z0-9]+)*)$/;
/** Resources whose detail is read at once. */
const READS_AT_ONCE = 8;

interface PullOptions extends RemoteOptions {
  readonly follow?: boolean;
}

/**
 * `playbook pull <owner>/<catalogSlug> <dir> [--follow]` (D27): writes one Catalog of a running service
 * as a folder of an import tree, `<dir>/<catalogSlug>/` (D15), so that `playbook publish` of that
 * folder writes nothing, and with `--follow` keeps it current until SIGINT or SIGTERM (exit 0).
 *
 * The Catalog and its Resources come from the sync feed (an initial sync, then its changes, each
 * request held until something changes); their content and manifests from each Resource's detail,
 * revalidated with its ETag. The service is `--url`, else `PLAYBOOK_URL`, else the local default; the
 * key is `PLAYBOOK_API_KEY` (never a flag: flags end up in shell histories and CI logs).
 *
 * @example
 * PLAYBOOK_API_KEY=svc_sk_test_… playbook pull org/handbook ./catalogs && playbook publish ./catalogs/handbook
 */
export function registerPullCommand(program: Command, context: CliContext): void {
  program
    .command('pull')
    .description(
      'write one Catalog of a running service as an import folder, <dir>/<catalogSlug>/; with --follow, keep it current',
    )
    .argument('<ref>', 'owner/catalogSlug; owner is svc or org (your account)')
    .argument('<dir>', 'the folder of catalog folders to write it in')
    .option('--follow', 'keep the folder current as the Catalog changes, until interrupted (Ctrl-C)')
    .option(...URL_OPTION)
    .option(...INSECURE_HTTP_OPTION)
    .addHelpText(
      'after',
      '\nEnvironment:\n' +
        `  PLAYBOOK_URL      where the service is, when --url is not given (default ${DEFAULT_SERVICE_URL})\n` +
        '  PLAYBOOK_API_KEY  an API key with the playbook:read scope\n\n' +
        'The folder holds catalog.json and resources/<slug>.json; content over 64 KiB, or not text, is\n' +
        'written beside, in resources/files/. Files of Resources that are gone are removed.\n\n' +
        'Examples:\n' +
        '  playbook pull org/handbook ./catalogs && playbook publish ./catalogs/handbook\n' +
        '  playbook pull svc/handbook ./mirror --follow\n',
    )
    .action(async (ref: string, dir: string, options: PullOptions, command: Command) => {
      const match = REF.exec(ref);
      if (!match) {
        command.error(
          `error: ${printable(JSON.stringify(ref))} is not a ref: give owner/catalogSlug, owner svc or org`,
        );
      }
      const [, owner, catalogSlug] = match as unknown as [string, Owner, string];
      const target = serviceTarget(context, options, command, DEFAULT_SERVICE_URL);
      const playbook = keyClient(context, target, command, 'playbook:read', { cache: true });
      const puller = new Puller(
        playbook,
        context,
        owner,
        catalogSlug,
        path.join(path.resolve(dir), catalogSlug),
      );
      const stop = stopped(context, options.follow === true);
      try {
        const syncToken = await puller.pull();
        if (options.follow) await puller.follow(syncToken, stop.signal);
      } catch (error) {
        if (stop.signal.aborted) return;
        callFailed('pull', error);
      } finally {
        stop.dispose();
      }
    });
}

/** One Catalog kept as a folder: what is written of it, and how its changes are applied. */
class Puller {
  private readonly folder: CatalogFolder;
  private catalogId: string | undefined;
  /** The slug of each Resource written, by id: a removal names the id alone. */
  private readonly written = new Map<string, string>();

  constructor(
    private readonly playbook: Playbook,
    private readonly context: CliContext,
    private readonly owner: Owner,
    private readonly slug: string,
    dir: string,
  ) {
    this.folder = new CatalogFolder(dir);
  }

  private get ref(): string {
    return `${this.owner}/${this.slug}`;
  }

  /** The initial sync: the Catalog and its Resources written, any other Resource's files removed. */
  async pull(): Promise<string> {
    const seen = new Set<string>();
    let syncToken: string | undefined;
    for await (const page of this.playbook.sync.iterate()) {
      await this.apply(page.data, seen, false);
      syncToken = page.nextSyncToken ?? syncToken;
    }
    if (this.catalogId === undefined) {
      throw new CommandError(`pull failed: no Catalog ${this.ref} that this key can read`);
    }
    await this.folder.removeAllBut(seen);
    this.context.stdout.write(
      `pulled ${this.ref} into ${this.folder.dir}: ${seen.size} resource${seen.size === 1 ? '' : 's'}\n`,
    );
    return syncToken!;
  }

  /** Applies changes as they come, until `signal` aborts. */
  async follow(syncToken: string, signal: AbortSignal): Promise<void> {
    let seen = new Set<string>();
    const pages = this.playbook.sync.follow({
      syncToken,
      signal,
      onError: (error) => {
        const why =
          error instanceof PlaybookError ? `${error.status || ''} ${error.code}`.trim() : String(error);
        this.context.stderr.write(`pull: ${printable(why)}; going on\n`);
      },
    });
    for await (const page of pages) {
      // A position the service no longer takes: everything is sent again, and what is not is gone.
      if (page.restarted) seen = new Set();
      await this.apply(page.data, seen, !page.initial);
      if (page.initial && page.nextSyncToken !== undefined) {
        for (const slug of await this.folder.removeAllBut(seen)) this.say('-', slug);
      }
    }
  }

  /** Writes what `items` say of this Catalog, and counts each Resource written in `seen`. */
  private async apply(items: readonly SyncItem[], seen: Set<string>, report: boolean): Promise<void> {
    const mine: ResourceListItem[] = [];
    for (const item of items) {
      if (item.type === 'catalog') {
        const catalog = item.catalog;
        if (catalog.owner !== this.owner || catalog.slug !== this.slug) continue;
        this.catalogId = catalog.id;
        const written = await this.writeCatalog(catalog);
        if (report && written !== 'unchanged') this.context.stdout.write(`~ ${this.ref}: catalog.json\n`);
      } else if (item.type === 'resource') {
        if (item.resource.catalogId === this.catalogId) mine.push(item.resource);
      } else if (item.entity === 'catalog' && item.id === this.catalogId) {
        // The Catalog left the caller's view, its Resources with it.
        await this.folder.removeAll();
        this.written.clear();
        this.context.stdout.write(`- ${this.ref}: no longer readable with this key; its files are removed\n`);
      } else if (item.entity === 'resource') {
        const slug = this.written.get(item.id);
        if (slug !== undefined && (await this.folder.removeResource(slug))) this.say('-', slug);
        this.written.delete(item.id);
      }
    }
    await mapWithLimit(mine, READS_AT_ONCE, async (resource) => {
      const written = await this.writeResource(resource);
      if (written === undefined) return;
      seen.add(resource.slug);
      if (report && written !== 'unchanged') this.say(written === 'created' ? '+' : '~', resource.slug);
    });
  }

  private say(sign: '+' | '-' | '~', slug: string): void {
    this.context.stdout.write(`${sign} ${this.ref}/${slug}: resources/${slug}.json\n`);
  }

  private writeCatalog(catalog: Catalog) {
    if (!catalog.currentVersion) {
      throw new CommandError(`pull failed: ${this.ref} has no published version to name in catalog.json`);
    }
    return this.folder.writeCatalog({
      name: catalog.name,
      version: catalog.currentVersion.version,
      status: catalog.status,
      description: catalog.description,
      facets: catalog.facets,
    });
  }

  /**
   * A Resource's file, from its detail (content and manifest, revalidated with its ETag); undefined when
   * the detail cannot be read with this key.
   */
  private async writeResource(item: ResourceListItem): Promise<Written | undefined> {
    let detail: Resource;
    try {
      detail = await this.playbook.resources.get(item.id);
    } catch (error) {
      // Listed but not readable: a plan it needs, or a current version not published to this key.
      if (error instanceof PlaybookError && (error.status === 403 || error.status === 404)) {
        this.context.stderr.write(
          `pull: ${this.ref}/${item.slug} is left out: ${error.code}: ${printable(error.detail)}\n`,
        );
        return undefined;
      }
      throw error;
    }
    const version = detail.currentVersion;
    const resource: FolderResource = {
      slug: detail.slug,
      kind: detail.kind,
      title: detail.title,
      status: detail.status,
      description: detail.description,
      facets: detail.facets,
      version: version.version,
      mediaType: version.mediaType,
      storageBackend: version.storageBackend,
      manifest: version.manifest,
      content: version.content,
    };
    const written = await this.folder.writeResource(resource);
    this.written.set(detail.id, detail.slug);
    return written;
  }
}
