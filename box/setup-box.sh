#!/usr/bin/env bash
# Prepares a GPU box once, at first boot (cloud-init runcmd), on both clouds.
#
# The guard comes first: the box root and the watchdog, resume and stop-record
# units are enabled before anything can fail, so a box whose setup breaks still
# stops itself when idle. Then: unattended upgrades are told to keep off the GPU
# driver and docker (an upgrade under a run breaks or restarts it), and docker, the
# NVIDIA driver and container toolkit and (on AWS) the `aws` CLI are installed only
# where the image lacks them, waiting for the network and for apt's lock (the
# first boot's unattended-upgrades holds it for minutes) with bounded retries.
# Last, the `ready` marker `fab` waits for. On any failure a `failed` marker with
# the log's tail takes its place, and `fab` shows it at once.
#
# Usage: setup-box.sh SSH_USER BOX_ROOT CLOUD [guard]   (CLOUD: aws or azure)
# Idempotent: run it again (as root) after fixing what failed. With `guard` it only
# turns the guard on (box root, units) and stops there: what `fab box-update` runs
# after writing new programs, so a box it updates has what a new box has.
# Every tool is called by name, so the tests run this script for real with fakes
# first on PATH; GLUCOSE_PCI_ROOT points the GPU probe at a fake sysfs,
# GLUCOSE_APT_ROOT the apt files into a temp dir, GLUCOSE_BOX_FS_ROOT the sshd
# drop-in under another root, GLUCOSE_SETUP_RETRY_SECONDS shortens the pauses between
# retries.
set -euo pipefail

ssh_user="$1"
box_root="$2"
cloud="$3"
mode="${4:-all}"
case "$cloud" in
    aws | azure) ;;
    *) echo "glucose-setup: ERROR: cloud is '$cloud', expected aws or azure" >&2; exit 2 ;;
esac
case "$mode" in
    all | guard) ;;
    *) echo "glucose-setup: ERROR: mode is '$mode', expected guard or nothing" >&2; exit 2 ;;
esac
pci_root="${GLUCOSE_PCI_ROOT:-/sys/bus/pci/devices}"
apt_root="${GLUCOSE_APT_ROOT:-}"
retry_pause="${GLUCOSE_SETUP_RETRY_SECONDS:-15}"
RETRY_ATTEMPTS=20  # with the default pause, ~5 minutes for network or apt to come free
APT_LOCK_TIMEOUT_SECONDS=600
NVIDIA_PCI_VENDOR=0x10de
LOG_TAIL_LINES=40
# NVIDIA's documented apt repository for the container toolkit:
# https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/install-guide.html
TOOLKIT_KEY_URL=https://nvidia.github.io/libnvidia-container/gpgkey
TOOLKIT_LIST_URL=https://nvidia.github.io/libnvidia-container/stable/deb/nvidia-container-toolkit.list
TOOLKIT_KEYRING="$apt_root/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg"
TOOLKIT_SOURCES="$apt_root/etc/apt/sources.list.d/nvidia-container-toolkit.list"
UPGRADE_HOLD="$apt_root/etc/apt/apt.conf.d/51glucose-training-hold"
# sshd takes the first value it reads and reads its drop-ins in name order (Ubuntu's
# sshd_config includes them first): a low number wins over the image's own.
SSHD_KEEPALIVE="${GLUCOSE_BOX_FS_ROOT:-}/etc/ssh/sshd_config.d/10-glucose-training-keepalive.conf"
SSHD_ALIVE_INTERVAL_SECONDS=60
SSHD_ALIVE_COUNT_MAX=3
setup_log="$box_root/setup.log"

log() { echo "glucose-setup: $*"; }

# retry DESCRIPTION COMMAND...: a bounded wait for the network or a lock to come free.
retry() {
    local what="$1" attempt=1
    shift
    until "$@"; do
        if [ "$attempt" -ge "$RETRY_ATTEMPTS" ]; then
            log "ERROR: $what failed $attempt times; giving up"
            return 1
        fi
        log "$what failed (attempt $attempt of $RETRY_ATTEMPTS); retrying in ${retry_pause}s"
        sleep "$retry_pause"
        attempt=$((attempt + 1))
    done
}

apt_get() {
    DEBIAN_FRONTEND=noninteractive apt-get -o "DPkg::Lock::Timeout=$APT_LOCK_TIMEOUT_SECONDS" "$@"
}

# Lists and install in one attempt: without a network, `apt-get update` may "succeed"
# with no lists, and only the install then fails.
update_and_install() {
    apt_get update -q && apt_get install -y -q --no-install-recommends "$@"
}

apt_install() {
    retry "apt-get install $*" update_and_install "$@"
}

has_nvidia_gpu() {
    grep -qsx "$NVIDIA_PCI_VENDOR" "$pci_root"/*/vendor
}

# The guard, on a new box and on one `fab box-update` brings new programs to.
turn_guard_on() {
    mkdir -p "$box_root/runs" "$box_root/datasets" "$box_root/leases" "$box_root/sweeps" \
        "$box_root/watchdog"
    # fab (as the SSH user) writes runs/<id>/STOPPED_BY_USER, caches datasets, leaves
    # leases, starts sweeps.
    chown "$ssh_user:$ssh_user" "$box_root/runs" "$box_root/datasets" "$box_root/leases" "$box_root/sweeps"
    systemctl daemon-reload
    # Timers restarted, not only started: an updated box runs its new schedules at once.
    systemctl enable glucose-watchdog.timer
    systemctl restart glucose-watchdog.timer
    # Started (a no-op when active), never restarted: its ExecStop records a shutdown
    # the watchdog did not ask for.
    systemctl enable --now glucose-stop-record.service
    # The service acts at boot, the timer while the box stays up; nothing starts it now.
    systemctl enable glucose-resume.service
    systemctl enable glucose-resume.timer
    systemctl restart glucose-resume.timer
    end_dead_ssh_sessions
}

# A terminal whose laptop went to sleep is a session (the watchdog's "ssh") until sshd
# notices the client is gone: by TCP keep-alive, about 2 hours. sshd's own keep-alive
# ends it after SSHD_ALIVE_COUNT_MAX unanswered probes, SSHD_ALIVE_INTERVAL_SECONDS apart.
end_dead_ssh_sessions() {
    mkdir -p "${SSHD_KEEPALIVE%/*}"
    cat > "$SSHD_KEEPALIVE" <<KEEPALIVE
# glucose-training: a client that stops answering (a laptop asleep) is logged out
# within minutes, so its session stops keeping the box busy for the idle watchdog.
ClientAliveInterval $SSHD_ALIVE_INTERVAL_SECONDS
ClientAliveCountMax $SSHD_ALIVE_COUNT_MAX
KEEPALIVE
    # Ubuntu's unit checks the configuration (sshd -t) before it reloads; new sessions
    # get the keep-alive, running ones keep what they started with.
    systemctl try-reload-or-restart ssh.service \
        || log "WARNING: sshd not reloaded; the keep-alive applies from its next start"
}

hold_upgrades() {
    # Unattended upgrades take package-name regexes; a new driver under a loaded old
    # module breaks nvidia-smi and CUDA, and a docker upgrade restarts every container.
    mkdir -p "${UPGRADE_HOLD%/*}"
    cat > "$UPGRADE_HOLD" <<'HOLD'
// glucose-training: keep unattended upgrades off the GPU stack and docker mid-run.
Unattended-Upgrade::Package-Blacklist {
    "nvidia-";
    "libnvidia-";
    "cuda-";
    "docker";
    "containerd";
};
HOLD
}

install_docker() {
    if command -v docker >/dev/null 2>&1; then
        log "docker already installed: keeping the image's own"
    else
        log "docker missing: installing docker.io"
        apt_install docker.io
        systemctl enable --now docker
    fi
    usermod -aG docker "$ssh_user"
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
    retry "ubuntu-drivers install" ubuntu-drivers install --gpgpu "nvidia:${version}-server"
    apt_install "nvidia-utils-${version}-server"
    if ! modprobe nvidia; then
        log "ERROR: the NVIDIA driver is installed but does not load: reboot the box" \
            "(sudo reboot), then run this script again"
        return 1
    fi
}

install_container_toolkit() {
    if command -v nvidia-ctk >/dev/null 2>&1; then
        log "NVIDIA container toolkit already installed"
    else
        log "NVIDIA container toolkit missing: installing it from NVIDIA's apt repository"
        mkdir -p "${TOOLKIT_KEYRING%/*}" "${TOOLKIT_SOURCES%/*}"
        retry "download of NVIDIA's key" download "$TOOLKIT_KEY_URL" "$TOOLKIT_KEYRING.asc"
        gpg --batch --yes --dearmor -o "$TOOLKIT_KEYRING" < "$TOOLKIT_KEYRING.asc"
        retry "download of NVIDIA's source list" download "$TOOLKIT_LIST_URL" "$TOOLKIT_SOURCES.new"
        sed "s#deb https://#deb [signed-by=$TOOLKIT_KEYRING] https://#g" "$TOOLKIT_SOURCES.new" \
            > "$TOOLKIT_SOURCES"
        rm -f "$TOOLKIT_KEYRING.asc" "$TOOLKIT_SOURCES.new"
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

download() {
    curl -fsSL --connect-timeout 20 --max-time 120 -o "$2" "$1"
}

install_aws_cli() {
    # The watchdog publishes its verdict with it, and the CloudWatch idle alarm stops
    # a box on that metric (or on its absence). The DLAMI has it; plain Ubuntu 22.04
    # (Volta boxes) does not. Ubuntu's `awscli` package (v1, universe) needs no
    # download from outside the archive and signs with the instance role like v2.
    if command -v aws >/dev/null 2>&1; then
        log "aws CLI already installed"
        return
    fi
    log "aws CLI missing: installing awscli for the idle verdict metric"
    apt_install awscli
}

mark_ready() {
    local gpu="absent"
    has_nvidia_gpu && gpu="nvidia"
    printf '{"ready_at": "%s", "gpu": "%s"}\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$gpu" \
        > "$box_root/ready.tmp"
    mv "$box_root/ready.tmp" "$box_root/ready"
    log "box ready: $box_root/ready"
}

mark_failed() {
    local status="$1"
    {
        echo "setup failed at $(date -u +%Y-%m-%dT%H:%M:%SZ) (exit $status); the idle" \
            "watchdog is on. Fix it, then: sudo bash $0 $ssh_user $box_root $cloud"
        echo "--- last $LOG_TAIL_LINES lines of $setup_log ---"
        tail -n "$LOG_TAIL_LINES" "$setup_log"
    } > "$box_root/failed.tmp"
    mv "$box_root/failed.tmp" "$box_root/failed"
    echo "glucose-setup: FAILED: $box_root/failed" >&2
}

main() {
    rm -f "$box_root/failed"
    turn_guard_on
    hold_upgrades
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
    mark_ready
}

mkdir -p "$box_root"
if [ "$mode" = guard ]; then
    turn_guard_on
    exit 0
fi
set +e
(set -e; main) 2>&1 | tee -a "$setup_log"
status="${PIPESTATUS[0]}"
set -e
if [ "$status" -ne 0 ]; then
    mark_failed "$status"
fi
exit "$status"
