#!/usr/bin/env bash
# Installs the real servers the integration tests run against, once; idempotent.
# Fixtures start them; a test whose server is missing skips loudly, so CI must
# have every one of them (this script is what `make test` runs first).
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

apt_packages=()
need() { command -v "$1" >/dev/null 2>&1 || apt_packages+=("$2"); }
need sshd openssh-server
need dockerd docker.io
need debootstrap debootstrap
need docker-registry docker-registry
need node nodejs
need npm npm
need cloud-init cloud-init  # checks the box's user data against its schema
need openssl openssl  # the keyless Blob fixture serves HTTPS with its own certificate
need chromium chromium  # a real headless browser looks at `fab tensorboard`'s pages

if [ "${#apt_packages[@]}" -gt 0 ]; then
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${apt_packages[@]}"
fi

# Azurite (Azure Blob emulator) from npm, kept inside the repo's ignored cache.
if [ ! -x .cache/node/node_modules/.bin/azurite-blob ]; then
    mkdir -p .cache/node
    npm install --prefix .cache/node --no-audit --no-fund --loglevel=error azurite@3
fi

# systemd-analyze verifies the box's units (tests/stack/test_cloud_init.py).
if ! command -v systemd-analyze >/dev/null 2>&1; then
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends systemd
fi

# checkov (the Dockerfile's policy checks, tests/trainer/image/test_lint.py) pins
# heavy deps that clash with the project venv's: it gets a venv of its own.
if [ ! -x .venv-checkov/bin/checkov ]; then
    python3 -m venv .venv-checkov
    .venv-checkov/bin/python -m pip install -q --no-compile "checkov==3.3.30"
fi
