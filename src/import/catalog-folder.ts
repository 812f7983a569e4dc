import path from 'node:path';
import { DATABASE_TEXT_MAX_BYTES } from '../catalog-writes/catalog-input.js';
import { utf8Size } from '../content/hash.js';
import { type Facets, type LifecycleStatus, type Manifest, MULTI_LINE_PATTERN } from '../schemas/common.js';
import type { ResourceKind, StorageBackend } from '../schemas/playbook.js';
import { type CatalogFile, type ResourceFile, resourceFileCheck } from './file-schemas.js';
import { FolderChanges, FolderRefusedError, type Written } from './folder-changes.js';
import { slugProblem } from './schema-problems.js';

export { FolderRefusedError, type Written } from './folder-changes.js';

/**
 * One Catalog folder of an import tree (D15), written rather than read: `catalog.json`, and
 * `resources/<slug>.json` per Resource, with the content inline or, when it is large or not text, in
 * `resources/files/<slug><ext>` named by `contentFile`. What `playbook import` or `playbook publish`
 * reads back from it is what was written: the same fields, the same content to the byte.
 *
 * Changes are made aside and applied together (folder-changes.ts): a change that fails or is refused
 * leaves the folder as it was. A file is written only when its bytes change. Only what the folder's
 * writer owns is ever deleted (D27): a `resources/<slug>.json` that parses as a resource file, and the
 * file of `resources/files/` it names; any other file stays.
 */

/** A Catalog as its folder holds it: its fields, and the label of its current version. */
export interface FolderCatalog {
  readonly name: string;
  readonly version: string;
  readonly status: LifecycleStatus;
  readonly description?: string | undefined;
  readonly facets?: Facets | undefined;
}

/** A Resource as its file holds it, with its current version's content and manifest. */
export interface FolderResource {
  readonly slug: string;
  readonly kind: ResourceKind;
  readonly title: string;
  readonly status: LifecycleStatus;
  readonly description?: string | undefined;
  readonly facets?: Facets | undefined;
  readonly version: string;
  readonly mediaType: string;
  readonly storageBackend: StorageBackend;
  readonly manifest: Manifest;
  readonly content: string;
}

/** Where content files go, inside `resources/`: a subfolder, so that no content is read as a resource file. */
const FILES = 'files';

/** Media types whose content is text a person edits; content of any other is kept in a file of its own. */
const TEXT_TYPES =
  /^(text\/|application\/(json|xml|yaml|x-yaml|javascript|toml)\b|[^;]*\+(json|xml|yaml)\b)/i;
/** Text a person reads as it is: no controls but tab and line breaks, no direction overrides (D21). */
const READABLE = new RegExp(MULTI_LINE_PATTERN);

/** A content file's extension by media type: a closed list, so that a media type never names a path. */
const EXTENSIONS: ReadonlyMap<string, string> = new Map([
  ['text/markdown', '.md'],
  ['text/plain', '.txt'],
  ['text/html', '.html'],
  ['text/csv', '.csv'],
  ['application/json', '.json'],
  ['application/xml', '.xml'],
  ['application/yaml', '.yaml'],
  ['application/x-yaml', '.yaml'],
]);

/** Whether a Resource's content goes in a file beside its JSON rather than inline. */
export function inFile(resource: Pick<FolderResource, 'mediaType' | 'content'>): boolean {
  return (
    utf8Size(resource.content) > DATABASE_TEXT_MAX_BYTES ||
    !TEXT_TYPES.test(resource.mediaType) ||
    !READABLE.test(resource.content)
  );
}

function extensionOf(mediaType: string): string {
  const type = mediaType.split(';')[0]!.trim().toLowerCase();
  return EXTENSIONS.get(type) ?? (TEXT_TYPES.test(type) ? '.txt' : '.bin');
}

/** The folders of a Catalog folder that its writer goes through, which must be real folders. */
const FOLDERS = ['resources', `resources/${FILES}`];

/** One change to a Catalog folder: files written and removed, applied together or not at all. */
export class CatalogFolderChange {
  private constructor(private readonly files: FolderChanges) {}

  /**
   * Starts a change to the Catalog's folder, named by its slug (`<tree>/<catalogSlug>`); refused when
   * the folder, `resources/` or `resources/files/` is not a real folder.
   */
  static async begin(dir: string): Promise<CatalogFolderChange> {
    return new CatalogFolderChange(await FolderChanges.begin(dir, FOLDERS));
  }

  async writeCatalog(catalog: FolderCatalog): Promise<Written> {
    const file: CatalogFile = {
      name: catalog.name,
      version: catalog.version,
      status: catalog.status,
      ...(catalog.description === undefined ? {} : { description: catalog.description }),
      ...(catalog.facets === undefined ? {} : { facets: catalog.facets }),
    };
    return (await this.files.write('catalog.json', json(file))).written;
  }

  /**
   * Writes a Resource's file, and its content file when it has one; removes the content file its file
   * named before when it names another now, or none.
   */
  async writeResource(resource: FolderResource): Promise<Written> {
    const slug = checkedSlug(resource.slug);
    const separate = inFile(resource);
    const contentFile = separate ? `${FILES}/${slug}${extensionOf(resource.mediaType)}` : undefined;
    const file: ResourceFile = {
      kind: resource.kind,
      title: resource.title,
      version: resource.version,
      mediaType: resource.mediaType,
      status: resource.status,
      ...(resource.description === undefined ? {} : { description: resource.description }),
      ...(resource.facets === undefined ? {} : { facets: resource.facets }),
      manifest: resource.manifest,
      storageBackend: resource.storageBackend,
      ...(contentFile === undefined ? { content: resource.content } : { contentFile }),
    };
    const content =
      contentFile === undefined
        ? 'unchanged'
        : (await this.files.write(`resources/${contentFile}`, resource.content)).written;
    const { written, before } = await this.files.write(`resources/${slug}.json`, json(file));
    const named = ownedContentFile(parsedResourceFile(before));
    if (named !== undefined && named !== contentFile) await this.files.delete(`resources/${named}`);
    return written === 'unchanged' ? (content === 'unchanged' ? 'unchanged' : 'updated') : written;
  }

  /** Removes a Resource's file, if it is one, and the content file it names; whether it was one. */
  async removeResource(slug: string): Promise<boolean> {
    const relative = `resources/${checkedSlug(slug)}.json`;
    const before = parsedResourceFile(await this.files.read(relative));
    if (before === undefined) return false;
    await this.files.delete(relative);
    const named = ownedContentFile(before);
    if (named !== undefined) await this.files.delete(`resources/${named}`);
    return true;
  }

  /** Removes the Resource files of every slug not in `keep`; returns the slugs whose files it removed. */
  async removeAllBut(keep: ReadonlySet<string>): Promise<string[]> {
    const removed: string[] = [];
    for (const entry of await this.files.list('resources')) {
      const slug = entry.name.slice(0, -'.json'.length);
      if (!entry.name.endsWith('.json') || keep.has(slug) || slugProblem(slug) !== undefined) continue;
      if (await this.removeResource(slug)) removed.push(slug);
    }
    return removed.sort();
  }

  /** Applies the change (folder-changes.ts: a refusal leaves the folder as it was). */
  apply(): Promise<void> {
    return this.files.apply();
  }

  /** Drops the change: the folder is left as it was. */
  discard(): Promise<void> {
    return this.files.discard();
  }
}

/** A Resource's slug, refused unless it is one: it becomes a file name. */
function checkedSlug(slug: string): string {
  const problem = slugProblem(slug);
  if (problem) throw new FolderRefusedError(`${JSON.stringify(slug)}: not a Resource slug: ${problem}`);
  return slug;
}

const strictUtf8 = new TextDecoder('utf-8', { fatal: true });

/** A file's bytes as a resource file (D15), if they are one: only those are the folder writer's to remove. */
function parsedResourceFile(bytes: Buffer | undefined): ResourceFile | undefined {
  if (bytes === undefined) return undefined;
  try {
    const value: unknown = JSON.parse(strictUtf8.decode(bytes));
    return resourceFileCheck(value) ? value : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The content file a resource file names, relative to `resources/`, when it is one the folder's writer
 * owns: a file right in `resources/files/`.
 */
function ownedContentFile(file: ResourceFile | undefined): string | undefined {
  const contentFile = file?.contentFile;
  if (contentFile === undefined || contentFile.includes('\0')) return undefined;
  const resources = path.resolve('/', 'resources');
  const target = path.resolve(resources, contentFile);
  return path.dirname(target) === path.join(resources, FILES) ? path.relative(resources, target) : undefined;
}

function json(value: unknown): string {
  return `${JSON.stringify(value, null, 2)}\n`;
}
