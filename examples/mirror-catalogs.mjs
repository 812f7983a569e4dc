#!/usr/bin/env node
// Mirrors the current content of every Resource of every Catalog the key can read into a folder:
//   <folder>/<owner>/<catalogSlug>/<resourceSlug>.<ext>
// Usage: PLAYBOOK_API_KEY=svc_sk_… PLAYBOOK_URL=http://127.0.0.1:8080 node examples/mirror-catalogs.mjs ./mirror [--follow]
// It reads the sync feed: an initial sync of everything the key can see, then, with --follow, each
// change as it happens (the service holds each request until something changes), until Ctrl-C.
// A service Resource offered to other plans than the account's (403 plan_required) is skipped and
// reported: the rest of the mirror goes on. Details revalidate with ETags.
// What the service sends becomes a path only once checked: a page that names a Resource or its Catalog
// by anything but a slug or a ref stops the mirror (exit 1) before any of that page is written, while
// what earlier pages wrote stays. Every file is written aside under a random name, created exclusively,
// then renamed; a symbolic link inside the folder is never followed, written or removed: the mirror
// stops at it.
import { randomUUID } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { Playbook, PlaybookError } from '@playbook/client';

const EXTENSIONS = new Map([
  ['text/markdown', '.md'],
  ['application/json', '.json'],
  ['text/plain', '.txt'],
]);
// The contract's patterns of a slug and of a Catalog's ref.
const SLUG = /^[a-z0-9]+(?:-[a-z0-9]+)*$/;
const CATALOG_REF = /^(svc|org)\/[a-z0-9]+(?:-[a-z0-9]+)*$/;

const [folder, ...flags] = process.argv.slice(2);
const follow = flags.includes('--follow');
if (!folder || !process.env.PLAYBOOK_API_KEY || flags.some((flag) => flag !== '--follow')) {
  console.error(
    'usage: PLAYBOOK_API_KEY=… [PLAYBOOK_URL=…] node examples/mirror-catalogs.mjs <folder> [--follow]',
  );
  process.exit(2);
}
const root = path.resolve(folder);

const playbook = new Playbook({
  apiKey: process.env.PLAYBOOK_API_KEY,
  baseUrl: process.env.PLAYBOOK_URL ?? 'http://127.0.0.1:8080',
  cache: true,
});

/** What the service sent that cannot be mirrored. */
class Refused extends Error {}

// What a terminal acts upon: control characters and direction overrides.
// biome-ignore lint/suspicious/noControlCharactersInRegex: the control characters are what it finds.
const UNPRINTABLE = /[\u0000-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/g;

/** A value from the service as a message shows it: JSON, controls escaped, at most 80 characters. */
function shown(value) {
  const text = (JSON.stringify(value) ?? String(value)).replace(
    UNPRINTABLE,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`,
  );
  return text.length > 80 ? `${text.slice(0, 80)}…` : text;
}

/** Refuses a Resource item whose Catalog ref or slug would not make a path inside the folder. */
function check(resource) {
  if (
    typeof resource?.catalogHumanRef !== 'string' ||
    !CATALOG_REF.test(resource.catalogHumanRef) ||
    resource.catalogHumanRef.length > 180 ||
    typeof resource.slug !== 'string' ||
    !SLUG.test(resource.slug) ||
    resource.slug.length > 120
  ) {
    throw new Refused(
      `the Resource ${shown(resource?.slug)} of ${shown(resource?.catalogHumanRef)} is not named by a slug ` +
        'and a ref; nothing of that page was written',
    );
  }
}

/** `relative` inside the folder, each folder on the way made if missing and refused unless a real one. */
async function inside(relative) {
  const file = path.resolve(root, relative);
  const below = path.relative(root, file);
  if (below === '' || below === '..' || below.startsWith(`..${path.sep}`) || path.isAbsolute(below)) {
    throw new Refused(`${shown(relative)} leads outside ${root}`);
  }
  await fs.mkdir(root, { recursive: true });
  let at = root;
  for (const part of path.relative(root, path.dirname(file)).split(path.sep).filter(Boolean)) {
    at = path.join(at, part);
    await fs.mkdir(at).catch((error) => {
      if (error.code !== 'EEXIST') throw error;
    });
    if (!(await fs.lstat(at)).isDirectory()) throw new Refused(`${at} is not a real folder`);
  }
  const existing = await fs.lstat(file).catch(() => undefined);
  if (existing && !existing.isFile()) throw new Refused(`${file} is not a real file`);
  return file;
}

/** The file and Catalog of each Resource written, by its id: a removal names the id alone. */
const files = new Map();

/** The Resource's detail, or undefined when its content is for plans the account is not on. */
async function detailOf(item) {
  try {
    return await playbook.resources.get(item.id);
  } catch (error) {
    if (error instanceof PlaybookError && error.code === 'plan_required') return undefined;
    throw error;
  }
}

/** Writes one Resource's current content; false when its plan keeps it out. */
async function write(item) {
  const detail = await detailOf(item);
  if (!detail) return false;
  const { currentVersion } = detail;
  const extension = EXTENSIONS.get(String(currentVersion.mediaType).split(';')[0]) ?? '.txt';
  const file = await inside(path.join(item.catalogHumanRef, `${item.slug}${extension}`));
  // Written aside under a name no one can guess or have made first, then renamed over the file.
  const aside = path.join(path.dirname(file), `.${randomUUID()}.partial`);
  await fs.writeFile(aside, currentVersion.content, { flag: 'wx' });
  await fs.rename(aside, file);
  files.set(item.id, { file, catalogId: item.catalogId });
  return true;
}

async function remove(id) {
  const held = files.get(id);
  if (!held) return;
  files.delete(id);
  await fs.rm(await inside(path.relative(root, held.file)), { force: true });
  console.log(`- ${held.file}`);
}

/** Applies one page of the feed, checked whole first; returns the refs written and skipped. */
async function apply(items) {
  for (const item of items) if (item?.type === 'resource') check(item.resource);
  const written = [];
  const skipped = [];
  for (const item of items) {
    if (item.type === 'resource') {
      const ref = `${item.resource.catalogHumanRef}/${item.resource.slug}`;
      if (await write(item.resource)) written.push(ref);
      else skipped.push(ref);
    } else if (item.type === 'removed' && item.entity === 'resource') {
      await remove(item.id);
    } else if (item.type === 'removed') {
      // A Catalog no longer visible takes its Resources with it.
      for (const [id, held] of files) if (held.catalogId === item.id) await remove(id);
    }
  }
  return { written, skipped };
}

try {
  let syncToken;
  const skipped = [];
  let written = 0;
  for await (const page of playbook.sync.iterate({ pageSize: 100 })) {
    const done = await apply(page.data);
    written += done.written.length;
    skipped.push(...done.skipped);
    syncToken = page.nextSyncToken ?? syncToken;
  }
  console.log(`mirrored ${written} resources into ${folder}`);
  if (skipped.length > 0) {
    const which = skipped.length === 1 ? '1 resource' : `${skipped.length} resources`;
    console.log(`skipped ${which} for plans this account is not on (plan_required): ${skipped.join(', ')}`);
  }
  if (follow) {
    const stop = new AbortController();
    process.once('SIGINT', () => stop.abort());
    process.once('SIGTERM', () => stop.abort());
    console.log('following changes; Ctrl-C to stop');
    try {
      let seen = new Set();
      for await (const page of playbook.sync.follow({ syncToken, signal: stop.signal })) {
        // The position expired: everything is sent again, and what is not sent is gone.
        if (page.restarted) seen = new Set();
        for (const item of page.data) if (item.type === 'resource') seen.add(item.resource.id);
        const done = await apply(page.data);
        if (page.initial && page.nextSyncToken) {
          for (const id of files.keys()) if (!seen.has(id)) await remove(id);
        }
        for (const ref of done.written) console.log(`~ ${ref}`);
        for (const ref of done.skipped) console.log(`skipped ${ref} (plan_required)`);
      }
    } catch (error) {
      if (!stop.signal.aborted) throw error;
    }
  }
} catch (error) {
  if (error instanceof Refused) {
    console.error(`mirror refused: ${error.message}`);
    process.exit(1);
  }
  if (!(error instanceof PlaybookError)) throw error;
  console.error(`mirror failed: ${error.message}`);
  process.exit(1);
}
