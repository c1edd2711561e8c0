#!/usr/bin/env bash
# Builds the icetail image from the repository's Dockerfile (`make image`).
#
# With a Docker engine: `docker build`. Without one (this project's CI machines have the docker
# client only): buildah, rootful, vfs storage and chroot isolation, which work inside a container
# that allows no overlay mounts and no new namespaces.
#
# Usage: deploy/image/build.sh [IMAGE]                  default IMAGE: icetail:<version>
# Environment:
#   BASE_IMAGE      the Dockerfile's base (default: its ARG default, the official python:3.11-slim-bookworm)
#   BUILDER         docker | buildah (default: docker when `docker info` answers, else buildah)
#   STORAGE_DRIVER  buildah's storage driver (default vfs)
#   PULL            buildah's pull policy (default missing; `never` for a local stand-in base)
# Under buildah, this machine's pip settings (index URLs, CA bundle) are mounted into the RUN
# steps only, so a build behind a TLS-intercepting proxy or a private index works and nothing
# of it stays in the image.
set -euo pipefail

cd "$(dirname "$0")/../.."
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
IMAGE=${1:-icetail:$VERSION}
STORAGE_DRIVER=${STORAGE_DRIVER:-vfs}
PULL=${PULL:-missing}
build_args=()
[ -n "${BASE_IMAGE:-}" ] && build_args+=(--build-arg "BASE_IMAGE=$BASE_IMAGE")

if [ -z "${BUILDER:-}" ]; then
  if command -v docker >/dev/null && docker info >/dev/null 2>&1; then BUILDER=docker; else BUILDER=buildah; fi
fi

started=$(date +%s)
case "$BUILDER" in
  docker)
    docker build "${build_args[@]}" -t "$IMAGE" .
    ;;
  buildah)
    command -v buildah >/dev/null || { echo "build.sh: no Docker engine and no buildah (apt-get install buildah)" >&2; exit 2; }
    mounts=()
    scratch=$(mktemp -d)
    trap 'rm -rf "$scratch"' EXIT
    # pip's settings of this machine, minus what points at its own disk (file:// indexes, find-links)
    {
      echo "[global]"
      for key in index-url extra-index-url trusted-host timeout default-timeout; do
        env_name=PIP_$(printf '%s' "$key" | tr 'a-z-' 'A-Z_')
        value=$(pip config get "global.$key" 2>/dev/null || printenv "$env_name" || true)
        value=$(printf '%s' "$value" | tr ' ' '\n' | grep -v '^file:' | tr '\n' ' ' || true)
        [ -n "${value// /}" ] && echo "$key = $value"
      done
      cert=$(pip config get global.cert 2>/dev/null || echo "${PIP_CERT:-}")
      if [ -n "$cert" ] && [ -f "$cert" ]; then
        cp "$cert" "$scratch/ca.crt"
        mounts+=(--volume "$scratch/ca.crt:/run/icetail-build/ca.crt:ro")
        echo "cert = /run/icetail-build/ca.crt"
      fi
    } > "$scratch/pip.conf"
    mounts+=(--volume "$scratch/pip.conf:/run/icetail-build/pip.conf:ro")
    # --format docker: the OCI format has no HEALTHCHECK, and buildah drops it without one.
    # PIP_CONFIG_FILE reaches the RUN steps as a build-time variable only (not an ENV of the image)
    buildah --storage-driver "$STORAGE_DRIVER" bud --isolation chroot --pull="$PULL" --layers --format docker \
      "${build_args[@]}" "${mounts[@]}" --build-arg PIP_CONFIG_FILE=/run/icetail-build/pip.conf \
      -t "$IMAGE" .
    ;;
  *) echo "build.sh: BUILDER must be docker or buildah" >&2; exit 2 ;;
esac
echo "build.sh: built $IMAGE with $BUILDER in $(( $(date +%s) - started ))s"
