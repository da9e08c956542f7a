"""What `fab download` tells the user: how many files each check verified and which
none did, and whether `pulumi destroy` (which deletes the bucket) is safe now.

Safe means every stored key is here and verified, nothing is only on the box, and the
run is not going: only then is the advice given, and only then does `fab download`
exit 0, so `fab download && pulumi destroy` cannot delete results it did not bring home.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from box.contract import STATE_RUNNING, STATE_UPLOAD_PENDING, RunRecord
from ops.data.transfer import CHECKS, KEY_CHARACTERS, LOCAL_MANIFEST, DownloadReport
from ops.runs import upload_pending
from ops.terminal_text import printable
from trainer.storage.local_paths import key_problem

PULUMI_DESTROY = "`pulumi destroy`"
"""What deletes a stack's storage; the local target's store is the user's to delete."""
NOT_SAFE_EXIT_CODE = 3
"""The download ran to its end, but destroying the stack's storage now would lose data."""
CHECK_NAMES = {
    "sidecar": "their .sha256 sidecar",
    "box": "the box's copy",
    "listing": "the store's listing (size and version)",
}


def _named(keys: list[str]) -> str:
    return f" ({printable(upload_pending.named(keys))})" if keys else ""


def summary(report: DownloadReport) -> str:
    """One line: what came, what each check verified, and which files none did."""
    verified = ", ".join(f"{len(report.verified[each])} by {CHECK_NAMES[each]}" for each in CHECKS)
    missing = sorted([*report.failed, *report.refused])
    return (
        f"{report.directory}: {len(report.fetched)} files fetched, {len(report.skipped)} "
        f"already here; verified: {verified}; not verified: {len(report.unverified)}"
        f"{_named(sorted(report.unverified))}; not downloaded: {len(missing)}{_named(missing)}; "
        f"manifest: {report.directory / LOCAL_MANIFEST}"
    )


@dataclass(frozen=True)
class RunOnBox:
    """How the run stands where `fab download` asked: its box (state "" where the box
    holds no record of it, or was not asked) and its record in storage."""

    run_id: str
    state: str = ""
    """The box's: `running` while its container runs, else its status.json's state."""
    folder: str = ""
    """Its run dir, as the box is reached (`user@host:/path`); "" offline."""
    restarts: bool | None = None
    """The box's resume unit starts its containers again (a box `pulumi up` made)."""
    stored: RunRecord = field(default_factory=RunRecord)
    """status.json as storage has it (the copy fetched), which the box's own outranks."""


def destroy_advice(
    report: DownloadReport, run: RunOnBox, offline: bool, deletion: str = PULUMI_DESTROY
) -> tuple[bool, str]:
    """(safe to `deletion`, the line that says so or says why not); `deletion` is what
    would delete the stored run (`pulumi destroy`, or on the local target the run's
    folder in its store). Every key, file name and why in it made safe to print."""
    if run.state == STATE_RUNNING:
        return False, f"not yet safe to {deletion}: the run is still going (`fab stop` first)"
    reasons = _not_safe_because(report, run)
    if reasons:
        return False, f"not safe to {deletion}: " + "; ".join(reasons)
    if offline:
        return True, (
            "every stored file is here and verified (the box was not asked: files only on it "
            f"are not counted): safe to {deletion} if the run has ended"
        )
    return True, f"everything is here and verified: safe to {deletion}"


def _key(key: str) -> str:
    return printable(key, KEY_CHARACTERS)


def _not_safe_because(report: DownloadReport, run: RunOnBox) -> list[str]:
    reasons = []
    if report.refused:
        first = report.refused[0]
        why = key_problem(first) or "it would land outside the run's directory"
        reasons.append(
            f"{len(report.refused)} stored keys were refused (e.g. '{_key(first)}': {why}); "
            "someone with write access to the bucket put them there: look before you trust "
            "this run"
        )
    if report.failed:
        key, why = next(iter(report.failed.items()))
        reasons.append(
            f"{len(report.failed)} stored files are not here (e.g. {_key(key)}: {_key(why)}); look "
            "at them in the store before it goes"
        )
    if report.unverified:
        key, why = next(iter(report.unverified.items()))
        reasons.append(
            f"{len(report.unverified)} files are here but not verified (e.g. {_key(key)}: "
            f"{_key(why)}); download again once the run has ended, or look at them in the store"
        )
    return [*reasons, *_waiting_on_the_box(report, run)]


def _waiting_on_the_box(report: DownloadReport, run: RunOnBox) -> list[str]:
    """Files that are on the box alone: a finished run's last uploads (its own state,
    else storage's where the box holds no record of it), or any run's not uploaded yet."""
    pending = run.state == STATE_UPLOAD_PENDING or (
        not run.state and run.stored.state == STATE_UPLOAD_PENDING
    )
    if pending:
        missing = report.box_only if run.state else run.stored.missing_uploads()
        where = f"the box in {run.folder}" if run.state else "the box that ran it"
        said = upload_pending.said(missing, run.run_id, run.restarts, where)
        return [f"the run {printable(said)}; download again once storage has them"]
    if report.box_only:
        return [
            f"{len(report.box_only)} files exist only on the box, in {run.folder} (e.g. "
            f"{_key(report.box_only[0])}); they upload when storage answers and the run's "
            f"container starts again ({upload_pending.who_starts(run.run_id, run.restarts)}), "
            "or copy them with `fab ssh`"
        ]
    return []
