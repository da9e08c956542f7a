import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.paths import REPO
from trainer.__main__ import main
from trainer.config import UserError
from trainer.data.dataset import load_dataset, split_cases
from trainer.data.pipeline import Normalisation, WindowPipeline


def _write(directory, windows, glucose, case_id):
    directory.mkdir(parents=True, exist_ok=True)
    np.save(directory / "windows.npy", windows)
    np.save(directory / "glucose.npy", glucose)
    np.save(directory / "case_id.npy", case_id)
    (directory / "meta.json").write_text(json.dumps({"source": "test"}))
    return directory


def _valid(rows=30, length=40):
    rng = np.random.default_rng(0)
    return (
        rng.normal(size=(rows, length)).astype(np.float32),
        rng.uniform(60, 250, rows).astype(np.float32),
        (np.arange(rows) % 3).astype(np.int32),
    )


def _error(directory) -> str:
    with pytest.raises(UserError) as caught:
        load_dataset(directory)
    return str(caught.value)


def test_valid_dataset_loads(tmp_path):
    assert load_dataset(_write(tmp_path, *_valid())).windows.shape == (30, 40)


def test_missing_file_is_named(tmp_path):
    directory = _write(tmp_path, *_valid())
    (directory / "case_id.npy").unlink()
    assert "case_id.npy: file is missing" in _error(directory)


def test_row_count_mismatch_names_file_and_counts(tmp_path):
    windows, glucose, case_id = _valid()
    message = _error(_write(tmp_path, windows, glucose[:25], case_id))
    assert "glucose.npy" in message and "25 rows" in message and "[30]" in message


def test_non_numeric_dtype_is_refused(tmp_path):
    windows, glucose, case_id = _valid()
    message = _error(_write(tmp_path, windows.astype(np.complex64), glucose, case_id))
    assert "windows.npy" in message and "not numeric" in message


def test_nan_rows_are_counted(tmp_path):
    windows, glucose, case_id = _valid()
    windows[[2, 5, 9], 3] = np.nan
    windows[5, 7] = np.inf
    assert "windows.npy: NaN, inf or values beyond float32's range (±3.4e+38) in 3 rows" in _error(
        _write(tmp_path, windows, glucose, case_id)
    )


def test_float64_values_that_overflow_float32_are_counted(tmp_path):
    windows, glucose, case_id = _valid()
    windows = windows.astype(np.float64)
    windows[[1, 4], 0] = 1e39  # finite in float64, inf once the pipeline reads float32
    message = _error(_write(tmp_path, windows, glucose, case_id))
    assert "beyond float32's range (±3.4e+38) in 2 rows" in message


def test_glucose_outside_plausible_range_is_counted(tmp_path):
    windows, glucose, case_id = _valid()
    glucose[:4] = 5.5  # mmol/L slipped in
    message = _error(_write(tmp_path, windows, glucose, case_id))
    assert "glucose.npy: 4 rows outside 10-1000 mg/dL" in message


def test_fewer_than_three_cases_is_refused(tmp_path):
    windows, glucose, case_id = _valid()
    message = _error(_write(tmp_path, windows, glucose, case_id % 2))
    assert "case_id.npy: only 2 distinct cases" in message


def test_cli_reports_bad_dataset_in_one_line_with_exit_2(tmp_path, capsys):
    windows, glucose, case_id = _valid()
    glucose[0] = np.nan
    data = _write(tmp_path / "data", windows, glucose, case_id)
    code = main(["train", "--data", str(data), "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "glucose.npy: NaN or inf in 1 rows" in err


@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv"), reason="runs the trainer as another user"
)
def test_a_dataset_the_trainer_cannot_read_is_a_user_error_not_an_unwritable_run_dir():
    # root reads anything: the trainer runs as nobody, as the image runs as its own user.
    with tempfile.TemporaryDirectory(dir="/tmp") as shared:
        root = Path(shared)
        root.chmod(0o777)
        data = _write(root / "data", *_valid())
        data.chmod(0o755)
        (data / "windows.npy").chmod(0o600)
        result = subprocess.run(
            ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups",
             sys.executable, "-m", "trainer", "train", "--data", str(data),
             "--run-dir", str(root / "run")],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "windows.npy: permission denied; make the dataset dir" in result.stderr
    assert "uid 65534" in result.stderr


def test_splits_are_by_case_disjoint_and_cover_all_cases():
    splits = split_cases(np.arange(20), seed=3, val_fraction=0.15, test_fraction=0.15)
    parts = [set(splits.train), set(splits.val), set(splits.test)]
    assert not (parts[0] & parts[1] or parts[0] & parts[2] or parts[1] & parts[2])
    assert set().union(*parts) == set(range(20))


def test_splits_are_deterministic_from_the_seed():
    cases = np.arange(12)
    assert split_cases(cases, 1, 0.2, 0.2) == split_cases(cases, 1, 0.2, 0.2)
    assert split_cases(cases, 1, 0.2, 0.2) != split_cases(cases, 2, 0.2, 0.2)


def test_normalisation_uses_only_train_cases(tmp_path):
    windows, glucose, case_id = _valid()
    glucose[case_id == 2] = 900.0  # a wild held-out case must not move the statistics
    dataset = load_dataset(_write(tmp_path, windows, glucose, case_id))
    norm = Normalisation.from_train(dataset, [0, 1])
    assert norm.label_mean == pytest.approx(float(glucose[case_id < 2].mean()), rel=1e-6)


def test_pipeline_yields_every_train_window_once_per_epoch(tiny_data):
    dataset = load_dataset(tiny_data)
    norm = Normalisation.from_train(dataset, [0, 1, 2])
    pipeline = WindowPipeline(dataset, [0, 1, 2], norm, torch.device("cpu"), batch_size=10)
    order = pipeline.permutation(seed=0, epoch=4)
    labels = torch.cat([pipeline.batch(order, s)[1] for s in range(pipeline.steps_per_epoch)])
    assert labels.shape[0] == len(pipeline)
    assert torch.equal(labels.sort().values, pipeline.labels.sort().values)


def test_epoch_order_is_a_pure_function_of_seed_and_epoch(tiny_data):
    dataset = load_dataset(tiny_data)
    norm = Normalisation.from_train(dataset, [0, 1])
    pipeline = WindowPipeline(dataset, [0, 1], norm, torch.device("cpu"), batch_size=8)
    assert torch.equal(pipeline.permutation(5, 2), pipeline.permutation(5, 2))
    assert not torch.equal(pipeline.permutation(5, 2), pipeline.permutation(5, 3))


# Builds a 500k-window split (float16 on "disk", 200 MB as float32) in a process of
# its own and prints its peak resident memory while building, in float32 copies.
SPLIT_PEAK_MEMORY_SCRIPT = """
from pathlib import Path
import numpy as np, torch
from trainer.data.dataset import Dataset
from trainer.data.pipeline import Normalisation, WindowPipeline

def kib(key):
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith(key))

rows = 500_000
dataset = Dataset(Path("."), np.ones((rows, 100), np.float16), np.full(rows, 99, np.float32),
                  np.zeros(rows, np.int32), {}, "in-memory")
norm = Normalisation(0.5, 2.0, 100.0, 10.0, 100.0)
before = kib("VmRSS:")
Path("/proc/self/clear_refs").write_text("5")  # restart the peak (VmHWM) from here
pipeline = WindowPipeline(dataset, [0], norm, torch.device("cpu"), 256)
assert float(pipeline.windows[-1, 0, -1]) == 0.25
print((kib("VmHWM:") - before) * 1024 / pipeline.windows.nbytes)
"""


def test_building_a_split_holds_about_one_float32_copy_of_it_in_host_memory():
    # Converting and normalising the split whole held three float32 copies at its
    # peak: ~10 GB for M3, an OOM kill on a 16 GB g5.xlarge.
    result = subprocess.run(
        [sys.executable, "-c", SPLIT_PEAK_MEMORY_SCRIPT],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        check=True,
    )
    assert float(result.stdout) < 1.5


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_epoch_order_on_the_gpu_is_the_cpu_order(tiny_data):
    dataset = load_dataset(tiny_data)
    norm = Normalisation.from_train(dataset, [0, 1])
    on_cpu = WindowPipeline(dataset, [0, 1], norm, torch.device("cpu"), batch_size=8)
    on_gpu = WindowPipeline(dataset, [0, 1], norm, torch.device("cuda"), batch_size=8)
    assert torch.equal(on_gpu.permutation(5, 2).cpu(), on_cpu.permutation(5, 2))
    # the next epoch's, drawn ahead on a thread; then one not asked for ahead
    assert torch.equal(on_gpu.permutation(5, 3).cpu(), on_cpu.permutation(5, 3))
    assert torch.equal(on_gpu.permutation(6, 0).cpu(), on_cpu.permutation(6, 0))
