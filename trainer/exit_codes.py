"""Which error gets which exit code of `python -m trainer` (the codes are the box's
contract: `box.contract`'s `EXIT_*`).

status.json's `exit_code` and the process's are the same number: `train` records a
failure with `exit_code_for(error)` and `__main__` exits with it.
"""

from __future__ import annotations

import errno
import traceback

from box.contract import EXIT_FAILED, EXIT_UNWRITABLE, EXIT_USER_ERROR
from trainer.config import UserError

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


def exit_message(error: BaseException) -> str:
    """What the process prints as it ends on `error`: one line for a user error and an
    unwritable run dir (`__main__` prints it), the traceback for anything else (Python
    prints it). `train` puts it in the run log before its last upload
    (`trainer.checkpoints.run_log.seal_run_log`)."""
    if isinstance(error, UserError):
        return f"error: {error}"
    if isinstance(error, OSError) and exit_code_for(error) == EXIT_UNWRITABLE:
        return f"error: {unwritable_message(error)}"
    return "".join(traceback.format_exception(error))
