"""What `fab` says of a run that finished with its last uploads not all in storage
(contract.STATE_UPLOAD_PENDING), in the same words wherever it is said: `fab status`
(the box's run dir against storage's listing), `fab runs` and `fab tensorboard` (the
files storage's status.json names, once the box gave up starting the run, or none yet),
`fab download` (the files only on the box, or those storage's record names).

The run trained to its end and its summary is written: only some of its files wait on
the box, and the run's container started again sends them (the box's resume unit does
so a few times each boot; the end watch of a box no cloud made, right after the end);
nothing retrains it. A file name is the box's or the bucket's text: each line is made
safe to print where it is printed (`ops.terminal_text`), once.
"""

from __future__ import annotations

from box import contract, unfinished_uploads
from ops.terminal_text import cut

NAME_CHARACTERS = 120


def named(files: list[str]) -> str:
    """`a, b and 3 more`, as the box's message lists them (a few named, the rest
    counted), each name cut to NAME_CHARACTERS."""
    return unfinished_uploads.names_and_more([cut(name, NAME_CHARACTERS) for name in files])


def what_waits(missing: list[str] | None) -> str:
    """`finished, but 2 of its files have not reached storage (a, b)`: `missing` the
    files storage lacks, None where that is not known."""
    if missing is None:
        return "finished, but its last uploads have not all reached storage"
    if not missing:
        return "finished, its files all in storage, but its record does not say so yet"
    return f"finished, but {len(missing)} of its files have not reached storage ({named(missing)})"


def who_starts(run_id: str, restarts: bool | None) -> str:
    """Who starts the run's container again: the box's resume unit (`restarts`: a box
    `pulumi up` made), no resume unit (False: this machine, a lab box; box/end_watch.py,
    where `fab train` started one, a few times right after the end), or not known (None:
    a view of storage alone); and the command that does it now."""
    now = f"`docker start {contract.TRAIN_CONTAINER_PREFIX}{run_id}` on the box starts it now"
    return {
        True: f"the box's resume unit starts it a few times each boot; {now}",
        False: f"no resume unit there, only an end watch right after the end; {now}",
        None: f"a cloud box's resume unit starts it a few times each boot; {now}",
    }[restarts]


def said(
    missing: list[str] | None, run_id: str, restarts: bool | None, where: str = "the box"
) -> str:
    """The whole of it: what waits, where, and what sends it (or marks the record)."""
    by = who_starts(run_id, restarts)
    if missing == []:
        return f"{what_waits(missing)}: its container started again marks it ({by})"
    return (
        f"{what_waits(missing)}; they wait on {where}, and go when the run's container "
        f"starts again ({by})"
    )
