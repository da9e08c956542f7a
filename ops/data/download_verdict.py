"""What `fab download` tells the user: how many files each check verified and which
none did, and whether `pulumi destroy` (which deletes the bucket) is safe now.

Safe means every stored key is here and verified, nothing is only on the box, and the
run is not going: only then is the advice given, and only then does `fab download`
exit 0, so `fab download && pulumi destroy` cannot delete results it did not bring home.
"""

from __future__ import annotations

from box.contract import STATE_RUNNING, STATE_UPLOAD_PENDING
from ops.data.transfer import CHECKS, LOCAL_MANIFEST, DownloadReport

PULUMI_DESTROY = "`pulumi destroy`"
"""What deletes a stack's storage; the local target's store is the user's to delete."""
NOT_SAFE_EXIT_CODE = 3
"""The download ran to its end, but destroying the stack's storage now would lose data."""
CHECK_NAMES = {
    "sidecar": "their .sha256 sidecar",
    "box": "the box's copy",
    "listing": "the store's listing (size and version)",
}
NAMED_AT_MOST = 5


def _named(keys: list[str]) -> str:
    if not keys:
        return ""
    more = f" and {len(keys) - NAMED_AT_MOST} more" if len(keys) > NAMED_AT_MOST else ""
    return f" ({', '.join(keys[:NAMED_AT_MOST])}{more})"


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


def destroy_advice(
    report: DownloadReport,
    box_state: str,
    box_dir: str,
    container: str,
    offline: bool,
    deletion: str = PULUMI_DESTROY,
) -> tuple[bool, str]:
    """(safe to `deletion`, the line that says so or says why not); `deletion` is what
    would delete the stored run (`pulumi destroy`, or on the local target the run's
    folder in its store); `container` is the run's on the box, which uploads what is
    only there when it starts again."""
    if box_state == STATE_RUNNING:
        return False, f"not yet safe to {deletion}: the run is still going (`fab stop` first)"
    reasons = _not_safe_because(report, box_state, box_dir, container)
    if reasons:
        return False, f"not safe to {deletion}: " + "; ".join(reasons)
    if offline:
        return True, (
            "every stored file is here and verified (the box was not asked: files only on it "
            f"are not counted): safe to {deletion} if the run has ended"
        )
    return True, f"everything is here and verified: safe to {deletion}"


def _not_safe_because(report: DownloadReport, box_state: str, box_dir: str, container: str) -> list:
    reasons = []
    if report.refused:
        reasons.append(
            f"{len(report.refused)} stored keys were refused (e.g. {report.refused[0]!r}: "
            "outside the run's directory); someone with write access to the bucket put them "
            "there: look before you trust this run"
        )
    if report.failed:
        key, why = next(iter(report.failed.items()))
        reasons.append(
            f"{len(report.failed)} stored files are not here (e.g. {key}: {why}); look at "
            "them in the store before it goes"
        )
    if report.unverified:
        key, why = next(iter(report.unverified.items()))
        reasons.append(
            f"{len(report.unverified)} files are here but not verified (e.g. {key}: {why}); "
            "download again once the run has ended, or look at them in the store"
        )
    if report.box_only:
        pending = " (the run finished, its last uploads are pending)" * (
            box_state == STATE_UPLOAD_PENDING
        )
        reasons.append(
            f"{len(report.box_only)} files exist only on the box{pending}, in {box_dir} "
            f"(e.g. {report.box_only[0]}); they upload when storage answers and the run's "
            f"container starts again (`docker start {container}` on the box), "
            "or copy them with `fab ssh`"
        )
    return reasons
