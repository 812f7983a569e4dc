#!/usr/bin/env bash
# Run by the Containerfile's build stage in the built checkout: lays out in OUT what the runtime stage
# copies, and nothing else — the built service, its production dependencies, every workspace's
# package.json and build output (the client library, and whichever workspace `npm run build` builds
# next, such as the console's assets), the docs the service serves under /docs, and the demo content.
# No source, test, dev dependency, cache or build leftover.
set -euo pipefail
out="${1:?usage: assemble.sh OUT}"
mkdir -p "$out"

# D1: the SQLite driver this Node loads (sqliteDriverName in src/db/create-db.ts); the other one is
# never loaded here, and is left out with its sources.
driver="$(node --input-type=module -e "import { sqliteDriverName } from './dist/db/create-db.js'; process.stdout.write(sqliteDriverName())")"
unused=better-sqlite3-napi
[ "$driver" = better-sqlite3-napi ] && unused=better-sqlite3

npm prune --omit=dev --ignore-scripts --no-audit --no-fund >/dev/null
rm -rf "node_modules/$unused" node_modules/.cache node_modules/.package-lock.json

# The driver's package holds, besides the binary it loads, SQLite's sources and its build's
# intermediate files (better-sqlite3 12), or a prebuilt binary for every platform (13): the one binary
# this image loads stays.
native="node_modules/$driver"
rm -rf "$native/deps" "$native/src" "$native/build/Release/obj" "$native/build/Release/obj.target" \
  "$native/build/Release/.deps" "$native/build/Release/test_extension.node" "$native/build/deps"
if [ -d "$native/prebuilds" ]; then
  find "$native/prebuilds" -name '*.node' ! -name "linux-$(node -p process.arch).node" -delete
fi

# The dependencies' type declarations and source maps serve an editor and a debugger, never the
# running service (a stack trace through a dependency names its JavaScript file instead): some 45 MB.
find node_modules -type f \( -name '*.d.ts' -o -name '*.d.mts' -o -name '*.d.cts' -o -name '*.map' \) -delete

cp -a package.json README.md bin dist docs demo node_modules "$out/"
# Compiled tests and the compiler's incremental state are no part of the service.
find "$out/dist" \( -name '*.test.js' -o -name '*.test.js.map' -o -name '*.test.d.ts' -o -name '.tsbuildinfo' \) -delete

# Every workspace: its package.json, and its build output when it has one.
node -e "for (const w of require('./package.json').workspaces ?? []) console.log(w)" | while read -r pattern; do
  for workspace in $pattern; do
    [ -f "$workspace/package.json" ] || continue
    mkdir -p "$out/$workspace"
    cp -a "$workspace/package.json" "$out/$workspace/"
    [ -d "$workspace/dist" ] && cp -a "$workspace/dist" "$out/$workspace/"
  done
done
