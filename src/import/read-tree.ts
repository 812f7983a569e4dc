import type { Dirent } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import { crc32 } from 'node:zlib';
import {
  type CatalogInput,
  type CatalogInputs,
  defaultStorageBackend,
  manifestDigestOf,
  type ResourceBody,
  type ResourceInput,
  type ResourceSource,
} from '../catalog-writes/catalog-input.js';
import { ImportValidationError } from '../catalog-writes/refusals.js';
import { sha256Hex, utf8Size } from '../content/hash.js';
import { mapWithLimit, progressCounter } from '../db/batches.js';
import { Interned } from '../foundation/interned.js';
import { byText } from '../foundation/text-order.js';
import type { LifecycleStatus } from '../schemas/common.js';
import { MAX_CATALOG_RESOURCES, type ResourceKind, type StorageBackend } from '../schemas/playbook.js';
import { readContentFile, tooLarge } from './content-file.js';
import { catalogFileCheck, type ResourceFile, resourceFileCheck } from './file-schemas.js';
import { entryKind, kindOf, realEntryProblem } from './folder-entries.js';
import { schemaProblems, slugProblem } from './schema-problems.js';

/** Files read at once: enough to keep the disk busy, few enough to stay far from descriptor limits. */
const READ_CONCURRENCY = 32;

/** The tree when every file is valid; otherwise every problem found, in a stable order. */
export type TreeReading =
  | { readonly ok: true; readonly tree: CatalogInputs }
  | { readonly ok: false; readonly problems: string[] };

interface ResourceEntry {
  readonly slug: string;
  readonly absolute: string;
  readonly display: string;
}

interface FolderListing {
  readonly slug: string;
  readonly absolute: string;
  /** False for an entry that is not read at all (a symbolic link in place of a catalog folder). */
  readonly readable: boolean;
  readonly problems: string[];
  /** The slugs of its resource files, in order (paths are made from them when read: see `entryOf`). */
  readonly resources: string[];
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

/**
 * Reads and validates an import tree (D15) without touching storage. Every file is checked and every
 * problem reported, so that one run shows everything to fix.
 *
 * Layout: one folder per Catalog named by its slug, holding `catalog.json` and `resources/*.json`.
 * Names starting with a dot are skipped; so are plain files beside the catalog folders, and files in
 * `resources/` that do not end in `.json` (content files may sit there or in any folder of the
 * catalog). Symbolic links are never followed as catalog folders or resource files.
 *
 * @example
 * const reading = await readImportTree('demo/catalogs');
 * if (reading.ok) console.log(reading.tree.catalogs.map((c) => c.slug));
 */
export async function readImportTree(
  dir: string,
  onProgress?: (line: string) => void,
  options: TreeOptions = {},
): Promise<TreeReading> {
  const maxContentBytes = options.maxContentBytes ?? DEFAULT_MAX_CONTENT_BYTES;
  const root = path.resolve(dir);
  let entries: Dirent[];
  try {
    if (!(await fs.stat(root)).isDirectory()) return { ok: false, problems: [`${dir}: is not a folder`] };
    entries = await fs.readdir(root, { withFileTypes: true });
  } catch (error) {
    return { ok: false, problems: [`${dir}: cannot be read (${errorCode(error)})`] };
  }

  // A catalog folder given where the tree is expected: say so, rather than that its own
  // `resources/catalog.json` is missing.
  if (
    options.only === undefined &&
    entries.some((entry) => entry.name === 'catalog.json' && entry.isFile())
  ) {
    return {
      ok: false,
      problems: [
        `${dir}: is a catalog folder (it holds catalog.json); give the folder that holds catalog folders: ${path.dirname(root)}`,
      ],
    };
  }

  const listings: FolderListing[] = [];
  for (const entry of sortByName(entries)) {
    if (entry.name.startsWith('.')) continue;
    if (options.only !== undefined && entry.name !== options.only) continue;
    if (entry.isSymbolicLink()) {
      const problem = realEntryProblem(kindOf(entry), 'folder', 'catalog folders must be real folders');
      listings.push(emptyListing(entry.name, root, [`${entry.name}: ${problem}`]));
    } else if (entry.isDirectory()) {
      listings.push(
        await listCatalogFolder(root, entry.name, options.maxCatalogResources ?? MAX_CATALOG_RESOURCES),
      );
    }
  }

  if (options.only !== undefined && listings.length === 0) {
    return { ok: false, problems: [`${path.join(dir, options.only)}: is not a catalog folder`] };
  }
  const resourceCount = listings.reduce((count, listing) => count + listing.resources.length, 0);
  const counted = progressCounter(resourceCount, 'validated resource files:', onProgress);
  const catalogReadings = await Promise.all(
    listings.map((listing): Promise<CatalogReading> | CatalogReading =>
      listing.readable ? readCatalogFile(listing) : { problems: [] },
    ),
  );
  const work: { folder: CatalogFolder; slug: string }[] = [];
  for (const listing of listings) {
    const dir = listing.absolute;
    const realDir = listing.readable ? await fs.realpath(dir) : dir;
    const folder = { name: listing.slug, dir, realDir, maxContentBytes };
    for (const slug of listing.resources) work.push({ folder, slug });
  }
  const interned = new Interned();
  const resourceReadings = await mapWithLimit(work, READ_CONCURRENCY, async ({ folder, slug }) => {
    // The body is dropped here: it is read again, a batch at a time, when it is written.
    const reading = await readResourceFile(entryOf(folder, slug), folder, interned);
    counted();
    return reading;
  });

  const problems: string[] = [];
  const catalogs: CatalogInput[] = [];
  let next = 0;
  for (const [index, listing] of listings.entries()) {
    const catalogReading = catalogReadings[index]!;
    problems.push(...listing.problems, ...catalogReading.problems);
    const resources: ResourceInput[] = [];
    for (let i = 0; i < listing.resources.length; i++) {
      const reading = resourceReadings[next++]!;
      problems.push(...reading.problems);
      if (reading.resource) resources.push(reading.resource);
    }
    if (catalogReading.catalog) catalogs.push({ ...catalogReading.catalog, slug: listing.slug, resources });
  }
  if (problems.length > 0) return { ok: false, problems };
  return { ok: true, tree: { catalogs, resourceFileCount: resourceCount } };
}

function emptyListing(name: string, root: string, problems: string[]): FolderListing {
  return { slug: name, absolute: path.join(root, name), readable: false, problems, resources: [] };
}

async function listCatalogFolder(root: string, name: string, maxResources: number): Promise<FolderListing> {
  const absolute = path.join(root, name);
  const problems: string[] = [];
  const nameProblem = slugProblem(name);
  if (nameProblem) problems.push(`${name}: folder name: ${nameProblem}`);

  const resourcesDir = path.join(absolute, 'resources');
  let entries: Dirent[] = [];
  try {
    // A catalog without resources is valid: it publishes a version with no pins.
    const kind = await entryKind(resourcesDir);
    const problem = realEntryProblem(kind, 'folder');
    if (problem) problems.push(`${name}/resources: ${problem}`);
    else if (kind === 'folder') entries = await fs.readdir(resourcesDir, { withFileTypes: true });
  } catch (error) {
    problems.push(`${name}/resources: cannot be read (${errorCode(error)})`);
  }

  const resources: string[] = [];
  for (const entry of sortByName(entries)) {
    if (entry.name.startsWith('.') || !entry.name.endsWith('.json')) continue;
    const display = `${name}/resources/${entry.name}`;
    const problem = realEntryProblem(kindOf(entry), 'file', 'resource files must be real files');
    if (problem) {
      problems.push(`${display}: ${problem}`);
      continue;
    }
    const slug = entry.name.slice(0, -'.json'.length);
    const slugIssue = slugProblem(slug);
    if (slugIssue) problems.push(`${display}: file name: ${slugIssue}`);
    resources.push(slug);
  }
  if (resources.length > maxResources) {
    // Reported, and none of them read: the import fails without touching thousands of files.
    problems.push(
      `${name}/resources: holds ${resources.length} resource files; a Catalog holds at most ${maxResources}`,
    );
    return { slug: name, absolute, readable: true, problems, resources: [] };
  }
  return { slug: name, absolute, readable: true, problems, resources };
}

type CatalogReading = {
  problems: string[];
  catalog?: Omit<CatalogInput, 'slug' | 'resources'>;
};

async function readCatalogFile(listing: FolderListing): Promise<CatalogReading> {
  const display = `${listing.slug}/catalog.json`;
  const file = path.join(listing.absolute, 'catalog.json');
  const kind = await entryKind(file).catch(() => 'missing' as const);
  if (kind === 'symbolic link') return { problems: [`${display}: ${realEntryProblem(kind, 'file')}`] };
  const json = await readJson(file, display, true);
  if ('problem' in json) return { problems: [json.problem] };
  const problems = schemaProblems(catalogFileCheck, json.value, display);
  if (problems.length > 0 || !catalogFileCheck(json.value)) return { problems };
  const spec = json.value;
  return {
    problems,
    catalog: {
      origin: display,
      name: spec.name,
      version: spec.version,
      status: spec.status ?? 'active',
      ...(spec.description === undefined ? {} : { description: spec.description }),
      ...(spec.facets === undefined ? {} : { facets: spec.facets }),
    },
  };
}

type ResourceReading = { problems: readonly string[]; resource?: ResourceInput };
const NO_PROBLEMS: readonly string[] = Object.freeze([]);

/** The folder of a catalog, shared by all its resources. */
interface CatalogFolder {
  /** The folder's name: the catalog's slug. */
  readonly name: string;
  readonly dir: string;
  readonly realDir: string;
  /** D20: the most bytes of content one Resource Version may have. */
  readonly maxContentBytes: number;
}

export interface TreeOptions {
  /** D20: the most bytes of content one Resource Version may have (`PLAYBOOK_MAX_CONTENT_BYTES`). */
  readonly maxContentBytes?: number;
  /** D20: the most Resources one Catalog may hold (tests lower it). */
  readonly maxCatalogResources?: number;
  /** Reads this one catalog folder of the tree and no other (`playbook publish`). */
  readonly only?: string;
}

/** D20's default. */
export const DEFAULT_MAX_CONTENT_BYTES = 16 * 1024 * 1024;

/** A resource file of a catalog folder, from the folder and the resource's slug. */
function entryOf(folder: CatalogFolder, slug: string): ResourceEntry {
  return {
    slug,
    absolute: path.join(folder.dir, 'resources', `${slug}.json`),
    display: `${folder.name}/resources/${slug}.json`,
  };
}

/**
 * A valid resource file as the tree holds it: its fields, and where its manifest and content are read
 * again. A class, so that 100,000 of them share their methods and derive what they can.
 */
class FileResource implements ResourceInput, ResourceSource {
  constructor(
    readonly slug: string,
    private readonly folder: CatalogFolder,
    readonly kind: ResourceKind,
    readonly title: string,
    readonly version: string,
    readonly mediaType: string,
    readonly status: LifecycleStatus,
    readonly description: string | undefined,
    readonly facetsJson: string | undefined,
    readonly manifestDigest: string,
    readonly storageBackend: StorageBackend,
    readonly contentHash: string,
    readonly contentSizeBytes: number,
    /** CRC32 of the file's bytes: a file changed since it was planned is not written. */
    private readonly fileCrc: number,
  ) {}

  get origin(): string {
    return entryOf(this.folder, this.slug).display;
  }

  get source(): ResourceSource {
    return this;
  }

  async read(): Promise<ResourceBody> {
    const entry = entryOf(this.folder, this.slug);
    const again = await parseResourceFile(entry, this.folder);
    const body = again.body;
    if (
      body === undefined ||
      again.fileCrc !== this.fileCrc ||
      sha256Hex(body.content) !== this.contentHash
    ) {
      throw new ImportValidationError([
        `${entry.display}: changed while it was being imported; nothing was written, import again`,
      ]);
    }
    return body;
  }
}

type ParsedResourceFile = {
  problems: string[];
  spec?: ResourceFile;
  body?: ResourceBody;
  fileCrc?: number;
};

async function parseResourceFile(entry: ResourceEntry, folder: CatalogFolder): Promise<ParsedResourceFile> {
  const { display } = entry;
  const json = await readJson(entry.absolute, display, false);
  if ('problem' in json) return { problems: [json.problem] };
  const value = json.value;
  const problems = schemaProblems(resourceFileCheck, value, display);
  if (!isObject(value)) return { problems };

  const inline = value.content;
  const contentFile = value.contentFile;
  if (inline !== undefined && contentFile !== undefined) {
    problems.push(`${display}: contentFile: give either content or contentFile, not both`);
  } else if (inline === undefined && contentFile === undefined) {
    problems.push(`${display}: content: is required (or contentFile, a path relative to resources/)`);
  }
  let content = typeof inline === 'string' ? inline : undefined;
  if (inline === undefined && typeof contentFile === 'string' && contentFile.length > 0) {
    const read = await readContentFile(folder.dir, folder.realDir, contentFile, folder.maxContentBytes);
    if ('problem' in read) problems.push(`${display}: contentFile: ${read.problem}`);
    else content = read.content;
  }
  if (content !== undefined && utf8Size(content) > folder.maxContentBytes) {
    problems.push(`${display}: content: ${tooLarge(utf8Size(content), folder.maxContentBytes)}`);
  }
  if (problems.length > 0 || content === undefined || !resourceFileCheck(value)) return { problems };
  return {
    problems,
    spec: value,
    body: { manifest: JSON.stringify(value.manifest ?? {}), content },
    fileCrc: json.crc,
  };
}

async function readResourceFile(
  entry: ResourceEntry,
  folder: CatalogFolder,
  interned: Interned,
): Promise<ResourceReading> {
  const { problems, spec, body, fileCrc } = await parseResourceFile(entry, folder);
  if (!spec || !body || fileCrc === undefined) return { problems };
  const contentSizeBytes = utf8Size(body.content);
  return {
    // A valid file has none: one shared empty list rather than 100,000 of them.
    problems: NO_PROBLEMS,
    resource: new FileResource(
      entry.slug,
      folder,
      spec.kind,
      spec.title,
      interned.of(spec.version),
      interned.of(spec.mediaType),
      spec.status ?? 'active',
      spec.description,
      spec.facets === undefined ? undefined : interned.of(JSON.stringify(spec.facets)),
      manifestDigestOf(body.manifest),
      spec.storageBackend ?? defaultStorageBackend(contentSizeBytes),
      sha256Hex(body.content),
      contentSizeBytes,
      fileCrc,
    ),
  };
}

/** Parses a JSON file; a leading byte order mark is tolerated, since editors add one. */
async function readJson(
  file: string,
  display: string,
  required: boolean,
): Promise<{ value: unknown; crc: number } | { problem: string }> {
  let bytes: Buffer;
  try {
    bytes = await fs.readFile(file);
  } catch (error) {
    const code = errorCode(error);
    return {
      problem:
        code === 'ENOENT' && required ? `${display}: is missing` : `${display}: cannot be read (${code})`,
    };
  }
  let text: string;
  try {
    text = utf8.decode(bytes);
  } catch {
    return { problem: `${display}: is not valid UTF-8` };
  }
  try {
    return { value: JSON.parse(text) as unknown, crc: crc32(bytes) };
  } catch (error) {
    return { problem: `${display}: is not valid JSON (${withLine((error as Error).message, text)})` };
  }
}

/**
 * A JSON parse error's message with the line and column of its position, which an editor can go to
 * (JSON.parse names only the character offset on some versions of Node).
 */
export function withLine(message: string, text: string): string {
  const position = /at position (\d+)/.exec(message);
  if (!position || /line \d+/.test(message)) return message;
  const offset = Number(position[1]);
  const before = text.slice(0, offset);
  const line = before.split('\n').length;
  const column = offset - before.lastIndexOf('\n');
  return `${message} (line ${line} column ${column})`;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Names in code-unit order, not the locale's, so that listings and messages come out alike everywhere. */
function sortByName(entries: Dirent[]): Dirent[] {
  return [...entries].sort(byText((entry) => entry.name));
}

function errorCode(error: unknown): string {
  return (error as NodeJS.ErrnoException).code ?? (error as Error).message;
}
