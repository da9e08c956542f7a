"""`fab`'s listing of a run's copy on its box (a shell `find` over SSH) and the box's own
(box/unfinished_uploads.py's `expected_files`, a walk in Python) name the same files: the
one `fab download` calls "only on the box" is the one the box says storage lacks."""

from __future__ import annotations

import subprocess
from types import SimpleNamespace

from box import contract, unfinished_uploads
from ops.data import box_copy

RUN = "r-listed"
STEP = "step-000000040-epoch-0002.pt"


def _local_box(root):
    """A box whose commands run here, as its shell would run them over SSH."""

    def run(command, check=False):
        return subprocess.run(["bash", "-c", command], capture_output=True, text=True, check=check)

    return SimpleNamespace(root=str(root), run=run)


def test_fab_and_the_box_list_the_same_files_of_a_run_dir(tmp_path):
    run_dir = tmp_path / contract.RUNS_DIR / RUN
    checkpoints = run_dir / contract.CHECKPOINTS_DIR
    kept = [
        contract.METRICS_FILE,
        contract.STATUS_FILE,
        f"{contract.TB_DIR}/events.out.tfevents.1",
        f"{contract.PLOTS_DIR}/loss.png",
        f"{contract.CHECKPOINTS_DIR}/{STEP}",
        f"{contract.CHECKPOINTS_DIR}/{STEP}.sha256",
    ]
    left_out = [
        contract.LAUNCH_FILE,
        contract.STOPPED_BY_USER,
        "config.json.tmp",
        f"{contract.CHECKPOINTS_DIR}/{STEP}.damaged",
        f"{contract.CHECKPOINTS_DIR}/{contract.LAST_CHECKPOINT}.sha256",
        ".hidden",
        ".outbox/queued.json",
    ]
    for name in kept + left_out:
        (run_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (run_dir / name).write_text(name)
    (checkpoints / contract.LAST_CHECKPOINT).symlink_to(STEP)
    (checkpoints / contract.BEST_CHECKPOINT).symlink_to(STEP)
    (run_dir / "metrics-link.jsonl").symlink_to(contract.METRICS_FILE)

    on_the_box = unfinished_uploads.expected_files(run_dir)
    by_fab = box_copy.file_names(_local_box(tmp_path), RUN)

    assert on_the_box == by_fab == sorted(kept)
