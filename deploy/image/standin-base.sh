#!/usr/bin/env bash
# TEST FIXTURE ONLY - never a base for an image you ship.
#
# Builds a stand-in for the official `python:3.11-slim-bookworm` on a machine that cannot pull
# from Docker Hub but can reach a Debian mirror: debootstrap's bookworm minbase with Debian's
# python3 (3.11), pip and venv, `python`/`pip` linked into /usr/local/bin where the official
# image has them, and the official image's environment (LANG, PATH). It lets `make image` and
# `make image-smoke` build and run the real Dockerfile here. It is not the official base: its
# Python is Debian's 3.11.2, not python.org's latest 3.11, and it is built from whatever the
# mirror serves today. Release images are built FROM the pinned official base (the Dockerfile's
# default BASE_IMAGE).
#
# Usage (as root; needs debootstrap and buildah):
#   deploy/image/standin-base.sh [TAG]          # default tag: python:3.11-slim-bookworm
# Environment: MIRROR (default http://deb.debian.org/debian), WORKDIR (default
# /var/tmp/icetail-image), STORAGE_DRIVER (default vfs: works where overlay mounts do not).
set -euo pipefail

TAG=${1:-python:3.11-slim-bookworm}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
WORKDIR=${WORKDIR:-/var/tmp/icetail-image}
STORAGE_DRIVER=${STORAGE_DRIVER:-vfs}
ROOTFS=$WORKDIR/standin-rootfs

[ "$(id -u)" = 0 ] || { echo "standin-base.sh: debootstrap needs root" >&2; exit 2; }
for tool in debootstrap buildah; do
  command -v "$tool" >/dev/null || { echo "standin-base.sh: $tool is missing (apt-get install $tool)" >&2; exit 2; }
done

rm -rf "$ROOTFS" && mkdir -p "$WORKDIR"
debootstrap --variant=minbase --include=python3,python3-pip,python3-venv,ca-certificates \
  bookworm "$ROOTFS" "$MIRROR"

# The official image's apt sources: the release, its updates and security suites.
security=${MIRROR%/debian}/debian-security
cat > "$ROOTFS/etc/apt/sources.list" <<SOURCES
deb $MIRROR bookworm main
deb $MIRROR bookworm-updates main
deb $security bookworm-security main
SOURCES
# A mirror serving a dated snapshot has expired Release files; apt on the host is told so too.
if [ -f /etc/apt/apt.conf.d/99artifact-registry ]; then
  cp /etc/apt/apt.conf.d/99artifact-registry "$ROOTFS/etc/apt/apt.conf.d/"
fi
# The official image's Python is outside Debian's package manager: pip installs into it freely.
rm -f "$ROOTFS"/usr/lib/python3.*/EXTERNALLY-MANAGED
ln -sf /usr/bin/python3 "$ROOTFS/usr/local/bin/python"
ln -sf /usr/bin/python3 "$ROOTFS/usr/local/bin/python3"
printf '#!/bin/sh\nexec /usr/bin/python3 -m pip "$@"\n' > "$ROOTFS/usr/local/bin/pip"
chmod 755 "$ROOTFS/usr/local/bin/pip"
# What slim images leave out: apt lists, docs, man pages, the package cache.
rm -rf "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/cache/apt/*.bin "$ROOTFS"/var/cache/apt/archives/*.deb \
  "$ROOTFS"/usr/share/doc/* "$ROOTFS"/usr/share/man/* "$ROOTFS"/usr/share/locale/*

container=$(buildah --storage-driver "$STORAGE_DRIVER" from scratch)
trap 'buildah --storage-driver "$STORAGE_DRIVER" rm "$container" >/dev/null 2>&1 || true' EXIT
buildah --storage-driver "$STORAGE_DRIVER" add "$container" "$ROOTFS" / >/dev/null
buildah --storage-driver "$STORAGE_DRIVER" config \
  --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --env LANG=C.UTF-8 --env PYTHON_VERSION="$(chroot "$ROOTFS" python3 -c 'import platform; print(platform.python_version())')" \
  --cmd python3 --label org.icetail.test-fixture=standin-base "$container"
buildah --storage-driver "$STORAGE_DRIVER" commit --rm "$container" "$TAG" >/dev/null
trap - EXIT
rm -rf "$ROOTFS"
echo "standin-base.sh: built $TAG (test fixture only: a stand-in for the official base)"
buildah --storage-driver "$STORAGE_DRIVER" images "$TAG"
