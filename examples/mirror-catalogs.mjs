#!/usr/bin/env node
// Mirrors the current content of every Resource of every Catalog the key can read into a folder:
//   <folder>/<owner>/<catalogSlug>/<resourceSlug>.<ext>
// Usage: PLAYBOOK_API_KEY=svc_sk_… PLAYBOOK_URL=http://127.0.0.1:8080 node examples/mirror-catalogs.mjs ./mirror [--follow]
// It reads the sync feed: an initial sync of everything the key can see, then, with --follow, each
// change as it happens (the service holds each request until something changes), until Ctrl-C.
// A service Resource offered to other plans than the account's (403 plan_required) is skipped and
// reported: the rest of the mirror goes on. Details revalidate with ETags.
import fs from 'node:fs/promises';
import path from 'node:path';
import { Playbook, PlaybookError } from '@playbook/client';

const EXTENSIONS = { 'text/markdown': '.md', 'application/json': '.json', 'text/plain': '.txt' };

const [folder, ...flags] = process.argv.slice(2);
const follow = flags.includes('--follow');
if (!folder || !process.env.PLAYBOOK_API_KEY || flags.some((flag) => flag !== '--follow')) {
  console.error(
    'usage: PLAYBOOK_API_KEY=… [PLAYBOOK_URL=…] node examples/mirror-catalogs.mjs <folder> [--follow]',
  );
  process.exit(2);
}

const playbook = new Playbook({
  apiKey: process.env.PLAYBOOK_API_KEY,
  baseUrl: process.env.PLAYBOOK_URL ?? 'http://127.0.0.1:8080',
  cache: true,
});

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
  const extension = EXTENSIONS[currentVersion.mediaType.split(';')[0]] ?? '.txt';
  const file = path.join(folder, item.catalogHumanRef, `${item.slug}${extension}`);
  await fs.mkdir(path.dirname(file), { recursive: true });
  await fs.writeFile(file, currentVersion.content);
  files.set(item.id, { file, catalogId: item.catalogId });
  return true;
}

async function remove(id) {
  const held = files.get(id);
  if (!held) return;
  files.delete(id);
  await fs.rm(held.file, { force: true });
  console.log(`- ${held.file}`);
}

/** Applies one page of the feed; returns the humanRefs written and skipped. */
async function apply(items) {
  const written = [];
  const skipped = [];
  for (const item of items) {
    if (item.type === 'catalog') {
      await fs.mkdir(path.join(folder, item.catalog.owner, item.catalog.slug), { recursive: true });
    } else if (item.type === 'resource') {
      if (await write(item.resource)) written.push(item.resource.humanRef);
      else skipped.push(item.resource.humanRef);
    } else if (item.entity === 'resource') {
      await remove(item.id);
    } else {
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
  if (!(error instanceof PlaybookError)) throw error;
  console.error(`mirror failed: ${error.message}`);
  process.exit(1);
}
