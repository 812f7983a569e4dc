import fs from 'node:fs/promises';
import path from 'node:path';
import { DATABASE_TEXT_MAX_BYTES } from '../catalog-writes/catalog-input.js';
import { utf8Size } from '../content/hash.js';
import { type Facets, type LifecycleStatus, type Manifest, MULTI_LINE_PATTERN } from '../schemas/common.js';
import type { ResourceKind, StorageBackend } from '../schemas/playbook.js';
import type { CatalogFile, ResourceFile } from './file-schemas.js';

/**
 * One Catalog folder of an import tree (D15), written rather than read: `catalog.json`, and
 * `resources/<slug>.json` per Resource, with the content inline or, when it is large or not text, in
 * `resources/files/<slug><ext>` named by `contentFile`. What `playbook import` or `playbook publish`
 * reads back from it is what was written: the same fields, the same content to the byte. A file is
 * written only when its bytes change, and replaced whole (written aside, then renamed), so that a
 * reader never sees half of one.
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

/** What writing a file did. */
export type Written = 'created' | 'updated' | 'unchanged';

/** Where content files go, inside `resources/`: a subfolder, so that no content is read as a resource file. */
const FILES = 'files';

/** Media types whose content is text a person edits; content of any other is kept in a file of its own. */
const TEXT_TYPES =
  /^(text\/|application\/(json|xml|yaml|x-yaml|javascript|toml)\b|[^;]*\+(json|xml|yaml)\b)/i;
/** Text a person reads as it is: no controls but tab and line breaks, no direction overrides (D21). */
const READABLE = new RegExp(MULTI_LINE_PATTERN);

const EXTENSIONS: Readonly<Record<string, string>> = {
  'text/markdown': '.md',
  'text/plain': '.txt',
  'text/html': '.html',
  'text/csv': '.csv',
  'application/json': '.json',
  'application/xml': '.xml',
  'application/yaml': '.yaml',
  'application/x-yaml': '.yaml',
};

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
  return EXTENSIONS[type] ?? (TEXT_TYPES.test(type) ? '.txt' : '.bin');
}

export class CatalogFolder {
  /** @param dir the Catalog's folder, named by its slug (`<tree>/<catalogSlug>`). */
  constructor(readonly dir: string) {}

  private get resources(): string {
    return path.join(this.dir, 'resources');
  }

  async writeCatalog(catalog: FolderCatalog): Promise<Written> {
    const file: CatalogFile = {
      name: catalog.name,
      version: catalog.version,
      status: catalog.status,
      ...(catalog.description === undefined ? {} : { description: catalog.description }),
      ...(catalog.facets === undefined ? {} : { facets: catalog.facets }),
    };
    return writeIfChanged(path.join(this.dir, 'catalog.json'), json(file));
  }

  /** Writes a Resource's file, and its content file when it has one; removes a content file it no longer has. */
  async writeResource(resource: FolderResource): Promise<Written> {
    const separate = inFile(resource);
    const contentFile = separate ? `${FILES}/${resource.slug}${extensionOf(resource.mediaType)}` : undefined;
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
        : await writeIfChanged(path.join(this.resources, contentFile), resource.content);
    await this.removeContentFiles(resource.slug, contentFile);
    const written = await writeIfChanged(path.join(this.resources, `${resource.slug}.json`), json(file));
    return written === 'unchanged' ? (content === 'unchanged' ? 'unchanged' : 'updated') : written;
  }

  /** Removes a Resource's files; whether there were any. */
  async removeResource(slug: string): Promise<boolean> {
    const removed = await removeFile(path.join(this.resources, `${slug}.json`));
    return (await this.removeContentFiles(slug, undefined)) || removed;
  }

  /** Removes the files of every Resource not in `keep`; returns the slugs whose files it removed. */
  async removeAllBut(keep: ReadonlySet<string>): Promise<string[]> {
    const removed = new Set<string>();
    for (const name of await listFiles(this.resources)) {
      const slug = name.slice(0, -'.json'.length);
      if (name.endsWith('.json') && !keep.has(slug) && (await this.removeResource(slug))) removed.add(slug);
    }
    for (const name of await listFiles(path.join(this.resources, FILES))) {
      const slug = name.slice(0, name.lastIndexOf('.') === -1 ? undefined : name.lastIndexOf('.'));
      if (!keep.has(slug) && (await removeFile(path.join(this.resources, FILES, name)))) removed.add(slug);
    }
    return [...removed].sort();
  }

  /** Removes the Catalog's file and every Resource's. */
  async removeAll(): Promise<void> {
    await this.removeAllBut(new Set());
    await removeFile(path.join(this.dir, 'catalog.json'));
  }

  /** Content files of `slug` other than `kept` (a path relative to `resources/`). */
  private async removeContentFiles(slug: string, kept: string | undefined): Promise<boolean> {
    let removed = false;
    for (const name of await listFiles(path.join(this.resources, FILES))) {
      if (name.startsWith(`${slug}.`) && `${FILES}/${name}` !== kept) {
        removed = (await removeFile(path.join(this.resources, FILES, name))) || removed;
      }
    }
    return removed;
  }
}

function json(value: unknown): string {
  return `${JSON.stringify(value, null, 2)}\n`;
}

/** Writes `text` as UTF-8 unless the file holds exactly those bytes: aside first, then renamed over it. */
async function writeIfChanged(file: string, text: string): Promise<Written> {
  const bytes = Buffer.from(text, 'utf8');
  const held = await fs.readFile(file).catch((error: NodeJS.ErrnoException) => {
    if (error.code === 'ENOENT') return undefined;
    throw error;
  });
  if (held?.equals(bytes)) return 'unchanged';
  await fs.mkdir(path.dirname(file), { recursive: true });
  const aside = `${file}.${process.pid}.partial`;
  await fs.writeFile(aside, bytes);
  await fs.rename(aside, file);
  return held === undefined ? 'created' : 'updated';
}

async function removeFile(file: string): Promise<boolean> {
  try {
    await fs.unlink(file);
    return true;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return false;
    throw error;
  }
}

/** The names of the plain files of a folder; none when it does not exist. */
async function listFiles(dir: string): Promise<string[]> {
  try {
    return (await fs.readdir(dir, { withFileTypes: true }))
      .filter((entry) => entry.isFile() && !entry.name.startsWith('.'))
      .map((entry) => entry.name);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw error;
  }
}
