#!/usr/bin/env bash
# `npm run image`: builds Playbook's container image with podman from the Containerfile, on the two
# bases deploy/image/base.sh makes (or on BUILD_BASE and RUNTIME_BASE when both are set, such as the
# official node:24-bookworm and node:24-bookworm-slim), tags it PLAYBOOK_IMAGE_TAG
# (localhost/playbook:<version> by default), and prints its uncompressed size, which must stay under
# PLAYBOOK_IMAGE_MAX_MB (300). A build with nothing changed reuses every layer.
#
# podman runs with runc and the cgroupfs manager, which work on every root podman (crun refuses hybrid
# cgroup hierarchies), and with open-file and process limits under any machine's hard limits (podman's
# defaults exceed some).
set -euo pipefail
cd "$(dirname "$0")/../.."

version="$(node -p "require('./package.json').version")"
tag="${PLAYBOOK_IMAGE_TAG:-localhost/playbook:$version}"
max_mb="${PLAYBOOK_IMAGE_MAX_MB:-300}"
podman=(podman --runtime runc --cgroup-manager=cgroupfs)

if [ -z "${BUILD_BASE:-}" ] || [ -z "${RUNTIME_BASE:-}" ]; then
  bases="$(bash deploy/image/base.sh)"
  BUILD_BASE="$(sed -n 's/^BUILD_BASE=//p' <<<"$bases")"
  RUNTIME_BASE="$(sed -n 's/^RUNTIME_BASE=//p' <<<"$bases")"
fi
# The certificate authorities npm trusts here, when it is told of some (a proxy of its own in front of
# the registry): lent to the build's install as a secret, never kept in the image.
secrets=()
cafile="$(npm config get cafile 2>/dev/null || true)"
if [ -n "$cafile" ] && [ -f "$cafile" ]; then secrets=(--secret "id=npm-cafile,src=$cafile"); fi
# Where the source lives, for the image's label: the repository's remote, without any credential.
source_url="$(git remote get-url origin 2>/dev/null | sed -E 's#^([a-z+]+://)[^/@]*@#\1#' || true)"

started="$(date +%s)"
"${podman[@]}" build --format docker --layers --jobs 1 \
  --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 \
  --build-arg "BUILD_BASE=$BUILD_BASE" --build-arg "RUNTIME_BASE=$RUNTIME_BASE" \
  --build-arg "VERSION=$version" --build-arg "SOURCE=$source_url" "${secrets[@]}" \
  --file Containerfile --tag "$tag" .
seconds="$(($(date +%s) - started))"

bytes="$("${podman[@]}" image inspect --format '{{.Size}}' "$tag")"
mb="$(((bytes + 999999) / 1000000))"
printf 'image %s: %s MB uncompressed (at most %s), built in %s s\n' "$tag" "$mb" "$max_mb" "$seconds"
if [ "$mb" -gt "$max_mb" ]; then
  printf 'image %s is over %s MB\n' "$tag" "$max_mb" >&2
  exit 1
fi
