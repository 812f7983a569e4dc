#!/usr/bin/env node
// Mirrors the current content of every Resource of every Catalog the key can read into a folder:
//   <folder>/<owner>/<catalogSlug>/<resourceSlug>.<ext>
// Usage: PLAYBOOK_API_KEY=svc_sk_… PLAYBOOK_URL=http://127.0.0.1:8080 node examples/mirror-catalogs.mjs ./mirror
// A service Resource offered to other plans than the account's (403 plan_required) is skipped and
// reported: the rest of the mirror goes on. Reads revalidate with ETags, so a second run in the same
// process fetches only what changed.
import fs from 'node:fs/promises';
import path from 'node:path';
import { Playbook, PlaybookError } from '@playbook/client';

const EXTENSIONS = { 'text/markdown': '.md', 'application/json': '.json', 'text/plain': '.txt' };

const folder = process.argv[2];
if (!folder || !process.env.PLAYBOOK_API_KEY) {
  console.error('usage: PLAYBOOK_API_KEY=… [PLAYBOOK_URL=…] node examples/mirror-catalogs.mjs <folder>');
  process.exit(2);
}

const playbook = new Playbook({
  apiKey: process.env.PLAYBOOK_API_KEY,
  baseUrl: process.env.PLAYBOOK_URL ?? 'http://127.0.0.1:8080',
  cache: true,
});

/** The Resource's detail, or undefined when its content is for plans the account is not on. */
async function detailOf(item) {
  try {
    return await playbook.resources.get(item.id);
  } catch (error) {
    if (error instanceof PlaybookError && error.code === 'plan_required') return undefined;
    throw error;
  }
}

try {
  let written = 0;
  const skipped = [];
  for await (const catalog of playbook.catalogs.iterate({ pageSize: 100 })) {
    const dir = path.join(folder, catalog.owner, catalog.slug);
    await fs.mkdir(dir, { recursive: true });
    for await (const item of playbook.resources.iterate(catalog.owner, catalog.slug, { pageSize: 100 })) {
      const detail = await detailOf(item);
      if (!detail) {
        skipped.push(item.humanRef);
        continue;
      }
      const { currentVersion } = detail;
      const extension = EXTENSIONS[currentVersion.mediaType.split(';')[0]] ?? '.txt';
      await fs.writeFile(path.join(dir, `${item.slug}${extension}`), currentVersion.content);
      written++;
    }
  }
  console.log(`mirrored ${written} resources into ${folder}`);
  if (skipped.length > 0) {
    const which = skipped.length === 1 ? '1 resource' : `${skipped.length} resources`;
    console.log(`skipped ${which} for plans this account is not on (plan_required): ${skipped.join(', ')}`);
  }
} catch (error) {
  if (!(error instanceof PlaybookError)) throw error;
  console.error(`mirror failed: ${error.message}`);
  process.exit(1);
}
