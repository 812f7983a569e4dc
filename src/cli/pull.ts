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
import {
  CatalogFolderChange,
  FolderRefusedError,
  type FolderResource,
  type Written,
} from '../import/catalog-folder.js';
import { slugProblem } from '../import/schema-problems.js';
import { stopped } from './audit.js';
import { type CliContext, CommandError } from './context.js';
import { DEFAULT_SERVICE_URL } from './get.js';
import { printable } from './printable.js';
import { type PulledResource, pulledCatalog, pulledDetail, pulledResource, refused } from './pulled-items.js';
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
        'written beside, in resources/files/. The files of Resources that are gone are removed: only\n' +
        'resource files, and the content files they name. Names from the service are checked and\n' +
        'symbolic links in the folder refused; a pull refused or failed leaves the folder as it was.\n\n' +
        'Examples:\n' +
        '  playbook pull org/handbook ./catalogs && playbook publish ./catalogs/handbook\n' +
        '  playbook pull svc/handbook ./mirror --follow\n',
    )
    .action(async (ref: string, dir: string, options: PullOptions, command: Command) => {
      const match = REF.exec(ref);
      if (!match || slugProblem(match[2]!) !== undefined) {
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

/**
 * One Catalog kept as a folder: what is written of it, and how its changes are applied. Each sync (the
 * initial one whole, then each page of changes) is one change of the folder, applied once every item
 * of it has been read and checked: a refusal or a failure on the way leaves the folder as it was.
 */
class Puller {
  private catalogId: string | undefined;
  /** The slug of each Resource written, by id: a removal names the id alone. */
  private readonly written = new Map<string, string>();

  constructor(
    private readonly playbook: Playbook,
    private readonly context: CliContext,
    private readonly owner: Owner,
    private readonly slug: string,
    private readonly dir: string,
  ) {}

  private get ref(): string {
    return `${this.owner}/${this.slug}`;
  }

  /** The initial sync: the Catalog and its Resources written, any other Resource's files removed. */
  async pull(): Promise<string> {
    const seen = new Set<string>();
    let syncToken: string | undefined;
    await this.change(async (folder) => {
      for await (const page of this.playbook.sync.iterate()) {
        await this.apply(folder, page.data, seen, []);
        syncToken = page.nextSyncToken ?? syncToken;
      }
      if (this.catalogId === undefined) {
        throw new CommandError(`pull failed: no Catalog ${this.ref} that this key can read`);
      }
      await folder.removeAllBut(seen);
    });
    this.context.stdout.write(
      `pulled ${this.ref} into ${printable(this.dir)}: ${seen.size} resource${seen.size === 1 ? '' : 's'}\n`,
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
      const lines: string[] = [];
      await this.change(async (folder) => {
        await this.apply(folder, page.data, seen, page.initial ? [] : lines);
        if (page.initial && page.nextSyncToken !== undefined) {
          for (const slug of await folder.removeAllBut(seen)) lines.push(this.line('-', slug));
        }
      });
      for (const line of lines) this.context.stdout.write(line);
    }
  }

  /** Runs `work` on a change of the folder and applies it, or drops all of it when `work` fails. */
  private async change(work: (folder: CatalogFolderChange) => Promise<void>): Promise<void> {
    let folder: CatalogFolderChange;
    try {
      folder = await CatalogFolderChange.begin(this.dir);
    } catch (error) {
      throw refusal(error);
    }
    try {
      await work(folder);
      await folder.apply();
    } catch (error) {
      await folder.discard();
      throw refusal(error);
    }
  }

  /**
   * Writes what `items` say of this Catalog, counts each Resource written in `seen`, and adds a line
   * to `lines` for each file changed.
   */
  private async apply(
    folder: CatalogFolderChange,
    items: readonly SyncItem[],
    seen: Set<string>,
    lines: string[],
  ): Promise<void> {
    const mine: (ResourceListItem & PulledResource)[] = [];
    for (const item of items) {
      if (item.type === 'catalog') {
        const catalog = item.catalog;
        if (catalog?.owner !== this.owner || catalog.slug !== this.slug) continue;
        this.catalogId = pulledCatalog(catalog, this.ref).id;
        const written = await this.writeCatalog(folder, catalog);
        if (written !== 'unchanged') lines.push(`~ ${this.ref}: catalog.json\n`);
      } else if (item.type === 'resource') {
        if (item.resource?.catalogId === this.catalogId) mine.push(pulledResource(item.resource, this.ref));
      } else if (item.entity === 'catalog' && item.id === this.catalogId) {
        // The Catalog left the caller's view, its Resources with it; catalog.json stays (D27).
        await folder.removeAllBut(new Set());
        this.written.clear();
        lines.push(`- ${this.ref}: no longer readable with this key; its Resources' files are removed\n`);
      } else if (item.entity === 'resource') {
        const slug = this.written.get(item.id);
        if (slug !== undefined && (await folder.removeResource(slug))) lines.push(this.line('-', slug));
        this.written.delete(item.id);
      }
    }
    await mapWithLimit(mine, READS_AT_ONCE, async (resource) => {
      const written = await this.writeResource(folder, resource);
      if (written === undefined) return;
      seen.add(resource.slug);
      if (written !== 'unchanged') lines.push(this.line(written === 'created' ? '+' : '~', resource.slug));
    });
  }

  private line(sign: '+' | '-' | '~', slug: string): string {
    return `${sign} ${this.ref}/${slug}: resources/${slug}.json\n`;
  }

  private writeCatalog(folder: CatalogFolderChange, catalog: Catalog): Promise<Written> {
    if (!catalog.currentVersion) {
      throw new CommandError(`pull failed: ${this.ref} has no published version to name in catalog.json`);
    }
    return folder.writeCatalog({
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
  private async writeResource(
    folder: CatalogFolderChange,
    item: ResourceListItem & PulledResource,
  ): Promise<Written | undefined> {
    let detail: Resource;
    try {
      detail = pulledDetail(await this.playbook.resources.get(item.id), item, this.ref);
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
      slug: item.slug,
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
    const written = await folder.writeResource(resource);
    this.written.set(item.id, item.slug);
    return written;
  }
}

/** A refusal of the folder's, in the command's words; any other failure as it is. */
function refusal(error: unknown): unknown {
  return error instanceof FolderRefusedError ? refused(printable(error.message)) : error;
}
