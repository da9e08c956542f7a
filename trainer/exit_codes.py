"""Exit codes of `python -m trainer` (ARCHITECTURE.md), and which error gets which.

status.json's `exit_code` and the process's are the same number: `train` records a
failure with `exit_code_for(error)` and `__main__` exits with it.
"""

from __future__ import annotations

import errno

from trainer.config import UserError

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USER_ERROR = 2
# sysexits.h EX_UNAVAILABLE: a box of a multi-node run met no other in the rendezvous's
# time (one of them evicted and not back yet): start me again later, until the deadline.
EXIT_UNAVAILABLE = 69
# sysexits.h EX_IOERR: the run dir cannot be written (disk full, read-only, no access).
EXIT_UNWRITABLE = 74
# sysexits.h EX_TEMPFAIL: stopped or preempted with a checkpoint written: restart me
# (the box's resume unit is the only thing that does; docker's policy is `no`).
EXIT_STOPPED = 75
UNWRITABLE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM})


def exit_code_for(error: BaseException) -> int:
    if isinstance(error, UserError):
        return EXIT_USER_ERROR
    if isinstance(error, OSError) and error.errno in UNWRITABLE_ERRNOS:
        return EXIT_UNWRITABLE
    return EXIT_FAILED


def unwritable_message(error: OSError) -> str:
    """One line for an EXIT_UNWRITABLE error: what failed, where, what to do."""
    where = f" ({error.filename})" if error.filename else ""
    return (
        f"cannot write{where}: {error.strerror}; the run needs its run dir writable with "
        "free space: free some, fix its permissions or pass another --run-dir, then run "
        "the same command again (it resumes from the last checkpoint)"
    )
