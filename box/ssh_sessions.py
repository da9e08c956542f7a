"""Interactive SSH sessions, from the login records sshd writes.

sshd writes a utmp USER_PROCESS record when it gives a client a terminal (not for
a port forward, `ssh -N`, scp or fab's exec channels) and marks it dead at logout.
Only root and the utmp group can write the file, so unlike a process title
(`sshd: alice@pts/0`, which any program can take) a record cannot be faked by a
user. A record outlives an sshd that was killed, so its process must still be alive
and be a child of sshd. Standard library only.
"""

from __future__ import annotations

import struct
from pathlib import Path

# glibc's struct utmp on x86_64 and aarch64 (384 bytes): type, pid, line, id, user,
# host, exit status, session, time, address, padding.
UTMP_RECORD = struct.Struct("=hxxi32s4s32s256shhiii4i20s")
USER_PROCESS = 7
MAX_UTMP_BYTES = 4 * 1024 * 1024
SSHD_NAMES = (b"sshd", b"sshd-session")


def _text(field: bytes) -> str:
    return field.split(b"\0", 1)[0].decode(errors="replace")


def _parent_is_sshd(proc_root: Path, pid: int) -> bool:
    try:
        # The command name ends at the last ')': it may itself hold spaces and ')'.
        after_name = (proc_root / str(pid) / "stat").read_bytes().rsplit(b")", 1)[1]
        parent = int(after_name.split()[1])
        return (proc_root / str(parent) / "comm").read_bytes().strip() in SSHD_NAMES
    except (OSError, IndexError, ValueError):
        return False


def interactive_ssh_sessions(utmp_path: Path, proc_root: Path) -> list[str]:
    """`user@pts/N (pid P)` for each live terminal session sshd recorded."""
    try:
        with open(utmp_path, "rb") as handle:
            data = handle.read(MAX_UTMP_BYTES)
    except OSError:
        return []
    sessions = []
    usable = len(data) - len(data) % UTMP_RECORD.size
    for record in UTMP_RECORD.iter_unpack(data[:usable]):
        kind, pid, line, _, user = record[:5]
        tty = _text(line)
        if kind == USER_PROCESS and tty.startswith("pts/") and _parent_is_sshd(proc_root, pid):
            sessions.append(f"{_text(user)}@{tty} (pid {pid})")
    return sorted(sessions)
