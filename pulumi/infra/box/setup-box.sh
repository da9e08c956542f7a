#!/usr/bin/env bash
# Prepares a GPU box once, at first boot (cloud-init runcmd), on both clouds:
# docker and the NVIDIA container toolkit only where the image lacks them (the AWS
# Deep Learning AMI has both; a plain Ubuntu image has neither), on AWS the `aws`
# CLI the watchdog publishes the GPU metric with, the box root, the watchdog timer
# and the resume unit; the `ready` marker `fab` waits for comes last, so its
# presence means every step above succeeded.
#
# Usage: setup-box.sh SSH_USER BOX_ROOT CLOUD   (CLOUD: aws or azure)
# Every tool is called by name, so the tests run this script for real with fakes
# first on PATH; GLUCOSE_PCI_ROOT points the GPU probe at a fake sysfs and
# GLUCOSE_APT_ROOT the apt source and keyring files into a temp dir.
set -euo pipefail

ssh_user="$1"
box_root="$2"
cloud="$3"
case "$cloud" in
    aws | azure) ;;
    *) echo "glucose-setup: ERROR: cloud is '$cloud', expected aws or azure" >&2; exit 2 ;;
esac
pci_root="${GLUCOSE_PCI_ROOT:-/sys/bus/pci/devices}"
apt_root="${GLUCOSE_APT_ROOT:-}"
NVIDIA_PCI_VENDOR=0x10de
# NVIDIA's documented apt repository for the container toolkit:
# https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/install-guide.html
TOOLKIT_KEY_URL=https://nvidia.github.io/libnvidia-container/gpgkey
TOOLKIT_LIST_URL=https://nvidia.github.io/libnvidia-container/stable/deb/nvidia-container-toolkit.list
TOOLKIT_KEYRING="$apt_root/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg"
TOOLKIT_SOURCES="$apt_root/etc/apt/sources.list.d/nvidia-container-toolkit.list"

log() { echo "glucose-setup: $*"; }

apt_updated=""
apt_install() {
    if [ -z "$apt_updated" ]; then
        apt-get update -q
        apt_updated=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@"
}

has_nvidia_gpu() {
    grep -qsx "$NVIDIA_PCI_VENDOR" "$pci_root"/*/vendor
}

install_docker() {
    if command -v docker >/dev/null 2>&1; then
        log "docker already installed: keeping the image's own"
        return
    fi
    log "docker missing: installing docker.io"
    apt_install docker.io
    systemctl enable --now docker
}

install_gpu_driver() {
    if command -v nvidia-smi >/dev/null 2>&1; then
        log "NVIDIA driver already installed"
        return
    fi
    log "NVIDIA GPU without a driver: installing the recommended server driver"
    apt_install ubuntu-drivers-common
    local version
    version=$(ubuntu-drivers list --gpgpu 2>/dev/null | grep -o 'nvidia-driver-[0-9]*-server' \
        | grep -o '[0-9]*' | sort -n | tail -n 1 || true)
    if [ -z "$version" ]; then
        log "ERROR: ubuntu-drivers recommends no NVIDIA server driver for this GPU"
        return 1
    fi
    ubuntu-drivers install --gpgpu "nvidia:${version}-server"
    apt_install "nvidia-utils-${version}-server"
    modprobe nvidia
}

install_container_toolkit() {
    if command -v nvidia-ctk >/dev/null 2>&1; then
        log "NVIDIA container toolkit already installed"
    else
        log "NVIDIA container toolkit missing: installing it from NVIDIA's apt repository"
        curl -fsSL "$TOOLKIT_KEY_URL" | gpg --batch --yes --dearmor -o "$TOOLKIT_KEYRING"
        curl -fsSL "$TOOLKIT_LIST_URL" \
            | sed "s#deb https://#deb [signed-by=$TOOLKIT_KEYRING] https://#g" \
            > "$TOOLKIT_SOURCES"
        apt_updated=""
        apt_install nvidia-container-toolkit
    fi
    # Captured, not piped into `grep -q`: under pipefail an early-exiting grep
    # would fail the pipeline with SIGPIPE and look like "no nvidia runtime".
    local runtimes
    runtimes=$(docker info --format '{{json .Runtimes}}')
    if [[ "$runtimes" == *nvidia* ]]; then
        log "docker already knows the nvidia runtime"
        return
    fi
    nvidia-ctk runtime configure --runtime=docker
    systemctl restart docker
}

install_aws_cli() {
    # The watchdog publishes GPUUtilization with it, and the CloudWatch idle alarm
    # stops a box on that metric: without the CLI the alarm never fires. The DLAMI
    # has it; plain Ubuntu 22.04 (Volta boxes) does not. Ubuntu's `awscli` package
    # (v1, universe) needs no download from outside the archive and signs with the
    # instance role like v2 does.
    if command -v aws >/dev/null 2>&1; then
        log "aws CLI already installed"
        return
    fi
    log "aws CLI missing: installing awscli for the GPU idle metric"
    apt_install awscli
}

prepare_box_root() {
    mkdir -p "$box_root/runs" "$box_root/datasets" "$box_root/watchdog"
    # fab (as the SSH user) writes runs/<id>/STOPPED_BY_USER and caches datasets.
    chown "$ssh_user:$ssh_user" "$box_root/runs" "$box_root/datasets"
    usermod -aG docker "$ssh_user"
}

enable_units() {
    systemctl daemon-reload
    systemctl enable --now glucose-watchdog.timer
    # Not started now: it acts after a reboot, when an interrupted run may be waiting.
    systemctl enable glucose-resume.service
}

mark_ready() {
    local gpu="absent"
    has_nvidia_gpu && gpu="nvidia"
    printf '{"ready_at": "%s", "gpu": "%s"}\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$gpu" \
        > "$box_root/ready.tmp"
    mv "$box_root/ready.tmp" "$box_root/ready"
    log "box ready: $box_root/ready"
}

install_docker
if has_nvidia_gpu; then
    install_gpu_driver
    install_container_toolkit
else
    log "no NVIDIA GPU on the PCI bus: skipping driver and container toolkit"
fi
if [ "$cloud" = aws ]; then
    install_aws_cli
fi
prepare_box_root
enable_units
mark_ready
