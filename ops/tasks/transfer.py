"""Move data: datasets up to the stack's storage, run results down to this machine."""

from __future__ import annotations

from pathlib import Path

from invoke.exceptions import Exit
from rich.console import Console

from box import contract
from box.contract import RunRecord
from ops.cloud import api as power
from ops.data import box_copy, download_verdict
from ops.data import transfer as storage_sync
from ops.remote.boxes import AnyBox, box_for
from ops.run import names, on_box
from ops.target.resolve import resolve_target
from ops.tasks.flags import STACK_HELP, TARGET_HELP, task
from stack import storage_layout

console = Console(stderr=True, soft_wrap=True)


@task(
    help={
        "data": "dataset directory (windows.npy, glucose.npy, case_id.npy, meta.json)",
        "name": "name in storage (default: the directory's name)",
        "target": TARGET_HELP,
        "stack": STACK_HELP,
    }
)
def upload_data(c, data="", name="", target="", stack=""):
    """Upload a dataset to the stack's storage."""
    if not data:
        raise Exit("which dataset? pass --data DIR (make one: python -m trainer synth --out DIR)")
    data_dir = Path(data)
    if not data_dir.is_dir():
        raise Exit(f"--data {data}: no such directory; expected a dataset directory")
    where = resolve_target(target or None, stack or None)
    name = names.checked_name(name or data_dir.resolve().name, "--name", "dataset name")
    uri = storage_layout.dataset_uri(where.storage_uri, name)
    manifest = storage_sync.upload_dataset(data_dir, uri)
    total_mb = sum(entry["bytes"] for entry in manifest["files"].values()) / 1e6
    print(uri)
    console.print(
        f"{len(manifest['files'])} files ({total_mb:.1f} MB) in {uri}, manifest.json written; "
        f"train on it: fab train --dataset {name}"
    )


def _box_side(box: AnyBox, run_id: str) -> tuple[dict[str, str], str]:
    """sha256 of the box's run files that storage should hold, and the run's state:
    "running" while its container is, else status.json's state ("" when unknown)."""
    state = on_box.inspect_container(box, run_id)
    if state is not None and (state.running or state.restarting):
        # Files still change between mirror passes: comparing would only cry wolf.
        return {}, contract.STATE_RUNNING
    status = RunRecord.parse(
        box.read_text(f"{contract.run_dir(box.root, run_id)}/{contract.STATUS_FILE}")
    )
    return box_copy.file_hashes(box, run_id), status.state or ""


STATUS_READ_BYTES = 1024 * 1024
"""Of the status.json fetched: the trainer's is a few kB; a larger one is no record of its."""


def _stored_status(report: storage_sync.DownloadReport) -> RunRecord:
    """status.json as storage has it, where this download brought or kept it."""
    path = report.directory / contract.STATUS_FILE
    if contract.STATUS_FILE not in (*report.fetched, *report.skipped):
        return RunRecord()
    try:
        if path.stat().st_size > STATUS_READ_BYTES:
            return RunRecord()
    except OSError:
        return RunRecord()
    return RunRecord.read(report.directory)


@task(
    help={
        "run": "run id (default: the newest run on the box)",
        "to": "local directory (default: runs/<run id>)",
        "offline": "do not ask the box (it is gone): verify by sidecars and the store's listing",
        "target": TARGET_HELP,
        "stack": STACK_HELP,
    }
)
def download(c, run="", to="", offline=False, target="", stack=""):
    """Download a run's results, verified and resumable; exit 0 only when safe to destroy."""
    where = resolve_target(target or None, stack or None)
    box_hashes, box_state, box_dir = {}, "", ""
    if not offline:
        power.require_up(where, [0], "`fab download --offline` fetches the run from storage alone")
        box = box_for(where)
        run = on_box.resolve_run_id(box, run)
        box_hashes, box_state = _box_side(box, run)
        box_dir = box.location(contract.run_dir(box.root, run))
    elif not run:
        raise Exit("--offline needs --run ID (the box cannot be asked for the newest run)")
    run = names.checked_name(run, "--run")
    directory = Path(to or f"runs/{run}")
    run_uri = storage_layout.run_uri(where.storage_uri, run)
    report = storage_sync.download_run(run_uri, directory, box_hashes)
    print(download_verdict.summary(report))
    # No stack holds this machine's store: what goes is the run's folder, by hand.
    deletion = f"delete {run_uri}" if where.this_machine else download_verdict.PULUMI_DESTROY
    on_the_box = download_verdict.RunOnBox(
        run, box_state, box_dir, None if offline else where.set_up_by_cloud_init,
        _stored_status(report),
    )  # fmt: skip
    safe, advice = download_verdict.destroy_advice(report, on_the_box, offline, deletion)
    if not safe:
        raise Exit(advice, code=download_verdict.NOT_SAFE_EXIT_CODE)
    console.print(advice, markup=False, highlight=False)
