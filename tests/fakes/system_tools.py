"""Fake system tools for box scripts run for real: apt-get, systemctl, curl... that
record their calls (and fail on request), plus the real coreutils they need, alone on
PATH; a fake PCI bus with or without an NVIDIA GPU; apt's files in a temp dir."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

REAL_TOOLS = (
    *("bash", "grep", "sort", "tail", "sed", "mkdir", "date", "mv", "cat", "ln", "rm"),
    *("tee", "sleep"),
)
FAKE_SYSTEM_TOOL = """#!/bin/bash
echo "${0##*/} $*" >> "$FAKE_LOG"
# fails NAME: true while the fake should still fail NAME (counts down FAKE_<NAME>_FAILS).
fails() {
    local left_file="$FAKE_DIR/$1.fails"
    [ -f "$left_file" ] || echo "${2:-0}" > "$left_file"
    local left; left=$(cat "$left_file")
    [ "$left" -gt 0 ] || return 1
    echo $((left - 1)) > "$left_file"
}
[ "$1" = "-o" ] && shift 2  # apt-get -o DPkg::Lock::Timeout=...
case "${0##*/} $1" in
    "apt-get update")
        if fails apt "${FAKE_APT_BUSY:-0}"; then
            echo "E: Could not get lock /var/lib/dpkg/lock-frontend" >&2; exit 100
        fi ;;
    "apt-get install")
        [ -z "${FAKE_APT_FAIL:-}" ] || { echo "E: Unable to locate package" >&2; exit 100; }
        # An installed package brings its command, as the real one would.
        for package in "$@"; do
            case "$package" in
                docker.io) ln -s "$FAKE_TOOL" "${0%/*}/docker" ;;
                nvidia-utils-*) ln -s "$FAKE_TOOL" "${0%/*}/nvidia-smi" ;;
                nvidia-container-toolkit) ln -s "$FAKE_TOOL" "${0%/*}/nvidia-ctk" ;;
                awscli) ln -s "$FAKE_TOOL" "${0%/*}/aws" ;;
            esac
        done ;;
    "docker info") echo "$FAKE_DOCKER_RUNTIMES" ;;
    "gpg --batch") cat > /dev/null ;;
    "modprobe nvidia") [ -z "${FAKE_DRIVER_NEEDS_REBOOT:-}" ] || exit 1 ;;
    "ubuntu-drivers list")
        [ -z "${FAKE_NO_DRIVER:-}" ] || exit 0
        echo "nvidia-driver-535-server, (kernel modules provided by linux-modules-nvidia-535)"
        echo "nvidia-driver-550-server, (kernel modules provided by linux-modules-nvidia-550)" ;;
    "curl -fsSL")
        if fails curl "${FAKE_NETWORK_DOWN:-0}"; then
            echo "curl: (6) Could not resolve host" >&2; exit 6
        fi
        url="${*: -1}"; out=""
        while [ $# -gt 0 ]; do [ "$1" = "-o" ] && out="$2"; shift; done
        case "$url" in
            *.list) echo 'deb https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH) /' ;;
            *) echo KEY ;;
        esac > "$out" ;;
esac
exit 0
"""
ALWAYS_FAKE = ("apt-get", "systemctl", "ubuntu-drivers", "modprobe", "curl", "gpg", "chown")
IMAGE_TOOLS = ("docker", "nvidia-smi", "nvidia-ctk", "aws")  # the AWS DLAMI has all four


@dataclass(frozen=True)
class FakeSystem:
    env: dict[str, str]
    """PATH and the seams setup-box.sh reads (GLUCOSE_PCI_ROOT, GLUCOSE_APT_ROOT...)."""
    log: Path

    def calls(self) -> list[str]:
        return self.log.read_text().splitlines()


def fake_system(
    tmp_path: Path,
    *,
    image_has: tuple[str, ...] = IMAGE_TOOLS,
    gpu: bool = True,
    runtimes: str = '{"nvidia":{}}',
    also_fake: tuple[str, ...] = (),
) -> FakeSystem:
    """Only `image_has` of IMAGE_TOOLS on PATH, with the real tools and the fakes."""
    bin_dir, pci, apt_root = tmp_path / "bin", tmp_path / "pci", tmp_path / "apt"
    for directory in (bin_dir, pci / "0000:00:1e.0", apt_root / "etc/apt/sources.list.d"):
        directory.mkdir(parents=True, exist_ok=True)
    (pci / "0000:00:1e.0" / "vendor").write_text("0x10de\n" if gpu else "0x1d0f\n")
    for tool in REAL_TOOLS:
        if not (bin_dir / tool).exists():
            (bin_dir / tool).symlink_to(shutil.which(tool))
    fake = tmp_path / "fake-system-tool"
    fake.write_text(FAKE_SYSTEM_TOOL)
    fake.chmod(0o755)
    for tool in (*ALWAYS_FAKE, "usermod", *image_has, *also_fake):
        if not (bin_dir / tool).exists():
            (bin_dir / tool).symlink_to(fake)
    log = tmp_path / "calls.log"
    log.write_text("")
    env = {
        "PATH": str(bin_dir),
        "FAKE_LOG": str(log),
        "FAKE_DIR": str(tmp_path),
        "FAKE_TOOL": str(fake),
        "FAKE_DOCKER_RUNTIMES": runtimes,
        "GLUCOSE_PCI_ROOT": str(pci),
        "GLUCOSE_APT_ROOT": str(apt_root),
        # Where the box's own files go (the sshd drop-in): never this machine's /etc.
        "GLUCOSE_BOX_FS_ROOT": str(tmp_path / "fs"),
        "GLUCOSE_SETUP_RETRY_SECONDS": "0",
    }
    return FakeSystem(env, log)
