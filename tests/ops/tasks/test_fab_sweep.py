"""`fab sweep`'s mistakes end in one line, before anything ships to the box."""

import json
import os
import subprocess

import pytest

from tests.ops.conftest import FAB, assert_one_line_error
from tests.paths import REPO


@pytest.fixture
def target(tmp_path):
    """A target file for a box nobody needs to reach: these fail before connecting."""
    path = tmp_path / "target.json"
    path.write_text(json.dumps({
        "cloud": "local", "hosts": ["127.0.0.1"], "sshUser": "nobody", "sshPort": 1,
        "sshKeyPath": str(tmp_path / "no-key"), "storageUri": f"file://{tmp_path}/s",
        "registry": "", "imageRepository": "glucose-training", "vmSize": "local",
        "gpuCount": 1, "hourlyPriceUsd": 1.0, "spot": False,
    }))  # fmt: skip
    return path


def _sweep(target, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "GLUCOSE_TARGET": str(target)}
    return subprocess.run([str(FAB), "sweep", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["--param", "lr=1e-3,1e-2"], ["which dataset? pass --dataset NAME"]),
        (["--dataset", "d"], ["which flags? pass --param NAME=SPEC"]),
        (["--dataset", "d", "--param", "momentum=0.9"], ["--param momentum=0.9", "NAME one of"]),
        (["--dataset", "d", "--param", "dropout=0.1,1.5"], ["--dropout 1.5: expected 0 <= p < 1"]),
        (["--dataset", "d", "--param", "lr=1e-4:1e-2", "--method", "grid"],
         ["a grid needs listed values"]),
        (["--dataset", "d", "--param", "lr=1e-3,1e-2", "--trials", "5"],
         ["--trials 5: the grid has 2 points"]),
        (["--dataset", "d", "--param", "lr=1e-3,1e-2", "--method", "anneal"], ["--method anneal"]),
        (["--stop"], ["which sweep? pass --stop --sweep ID"]),
        (["--sweep", "../x"], ["--sweep '../x' is not a usable run id"]),
    ],
)  # fmt: skip
def test_a_mistake_is_one_line_naming_what_to_fix(target, args, fragments):
    assert_one_line_error(_sweep(target, *args), *fragments)


@pytest.mark.e2e  # sshd: the box is asked first, then storage
def test_a_new_sweep_given_an_earlier_sweeps_id_is_one_line_naming_it(local_box):
    from trainer.storage import open_store
    from trainer.sweep.spec import SweepSpec

    local_box.write_target()
    earlier = SweepSpec(
        sweep_id="sweep-old", dataset="d", data_dir="/d", runs_dir="/r",
        storage_uri=f"file://{local_box.root.parent / 'storage'}", params=["lr=0.001,0.003"],
        method="grid", trials=2,
    )  # fmt: skip
    open_store(f"{earlier.storage_uri}/sweeps/sweep-old").write_bytes(
        "sweep.json", earlier.to_json().encode()
    )
    done = local_box.fab("sweep", "--sweep", "sweep-old", "--dataset", "d", "--param",
                         "dropout=0.1,0.3")  # fmt: skip
    assert_one_line_error(
        done,
        "--sweep sweep-old names an earlier sweep sweep-old: lr=0.001,0.003 on d",
        "a new sweep needs a new id",
    )
