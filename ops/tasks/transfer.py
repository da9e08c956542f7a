"""Move data: datasets up to the stack's storage, run results down to this machine."""

from __future__ import annotations

import shlex
from pathlib import Path

from invoke import task
from invoke.exceptions import Exit
from rich.console import Console

from ops import storage_sync, trainer_container
from ops.remote import Box
from ops.target import resolve_target
from ops.tasks.image import STACK_HELP, TARGET_HELP

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
    name = name or data_dir.resolve().name
    uri = f"{where.storage_uri}/datasets/{name}"
    manifest = storage_sync.upload_dataset(data_dir, uri)
    total_mb = sum(entry["bytes"] for entry in manifest["files"].values()) / 1e6
    print(uri)
    console.print(
        f"{len(manifest['files'])} files ({total_mb:.1f} MB) in {uri}, manifest.json written; "
        f"train on it: fab train --dataset {name}"
    )


def _box_hashes(box: Box, run_id: str) -> tuple[dict[str, str], str]:
    """sha256 of the files of the box's run dir that storage mirrors; "running" or ""."""
    state = trainer_container.inspect_container(box, run_id)
    if state is not None and (state.running or state.restarting):
        # Files still change between mirror passes: comparing would only cry wolf.
        return {}, "running"
    run_dir = trainer_container.run_dir(box.root, run_id)
    # The files the trainer mirrors (trainer.sync): not checkpoints/ (uploaded on their
    # own under other names, verified by sidecars), no dot files, no *.tmp.
    listing = box.run(
        f"cd {shlex.quote(run_dir)} && find . \\( -path ./checkpoints -o -name '.?*' \\) -prune "
        "-o -type f ! -name '*.tmp' ! -name launch.json ! -name STOPPED_BY_USER "
        "-exec sha256sum {} +",
        check=False,
    )
    return storage_sync.parse_sha256sum(listing.stdout.splitlines()), ""


@task(
    help={
        "run": "run id (default: the newest run on the box)",
        "to": "local directory (default: runs/<run id>)",
        "offline": "do not ask the box (it is gone): verify against checkpoint sidecars only",
        "target": TARGET_HELP,
        "stack": STACK_HELP,
    }
)
def download(c, run="", to="", offline=False, target="", stack=""):
    """Download a run's results, sha256-verified and resumable."""
    where = resolve_target(target or None, stack or None)
    box_hashes, box_state = {}, ""
    if not offline:
        box = Box(where)
        run = trainer_container.resolve_run_id(box, run)
        box_hashes, box_state = _box_hashes(box, run)
    elif not run:
        raise Exit("--offline needs --run ID (the box cannot be asked for the newest run)")
    directory = Path(to or f"runs/{run}")
    report = storage_sync.download_run(f"{where.storage_uri}/runs/{run}", directory, box_hashes)
    print(
        f"{directory}: {len(report.fetched)} files fetched, {len(report.skipped)} already here; "
        f"sha256 verified against sidecars ({len(report.verified_by_sidecar)}) and the box's "
        f"copy ({len(report.verified_by_box)}); manifest: {directory / 'manifest.json'}"
    )
    console.print(_destroy_advice(report, box_state, offline))


def _destroy_advice(report: storage_sync.DownloadReport, box_state: str, offline: bool) -> str:
    if box_state == "running":
        return "not yet safe to `pulumi destroy`: the run is still going (`fab stop` first)"
    if report.box_only:
        return (
            f"not safe to `pulumi destroy`: {len(report.box_only)} files exist only on the "
            f"box (e.g. {report.box_only[0]}); wait for the upload or `fab ssh` to copy them"
        )
    if offline:
        return (
            f"box not asked: {len(report.verified_by_sidecar)} checkpoint files verified by "
            "their sidecars, the rest recorded in the manifest; safe to `pulumi destroy` "
            "if the run had ended"
        )
    return "everything is here and verified: safe to `pulumi destroy`"
