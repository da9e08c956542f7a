"""`python -m trainer prepare-vitaldb --vital-dir`: the dataset it writes from the
small cases of conftest.py, its summary and skips, and what a re-run does."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from tests.fixtures.vitaldb_cases import CORRUPT_CASE, LABS_CSV, RECORDING_S, USABLE, copy_cases
from trainer.__main__ import main
from trainer.data.dataset import load_dataset
from trainer.data.vitaldb.prepare import HEARTBEAT, Workspace
from trainer.reports.report import data_identity

DATASET_FILES = (
    "windows.npy", "glucose.npy", "case_id.npy", "window_time_s.npy", "label_gap_s.npy",
    "meta.json", "prepare_summary.json",
)  # fmt: skip


def prepare(out: Path, *args: str) -> int:
    return main(["prepare-vitaldb", "--out", str(out), "--workers", "1", *args])


def _arrays(out: Path) -> dict[str, np.ndarray]:
    return {name[:-4]: np.load(out / name) for name in DATASET_FILES if name.endswith(".npy")}


def _case(arrays: dict[str, np.ndarray], case: int) -> dict[str, np.ndarray]:
    rows = arrays["case_id"] == case
    return {key: value[rows] for key, value in arrays.items()}


@pytest.fixture(scope="module")
def prepared(vital_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("prepared") / "vitaldb"
    assert prepare(out, "--vital-dir", str(vital_dir), "--labs", str(LABS_CSV)) == 0
    return out


def test_writes_the_dataset_files_with_one_row_per_kept_window(prepared):
    assert sorted(path.name for path in prepared.iterdir()) == sorted(DATASET_FILES)
    arrays = _arrays(prepared)
    n = arrays["windows"].shape[0]
    assert arrays["windows"].shape == (n, 100) and arrays["windows"].dtype == np.float32
    assert {key: a.dtype for key, a in arrays.items() if key != "windows"} == {
        "glucose": np.float32, "case_id": np.int32,
        "window_time_s": np.float64, "label_gap_s": np.float32,
    }  # fmt: skip
    assert all(a.shape == (n,) for key, a in arrays.items() if key != "windows")
    assert json.loads((prepared / "meta.json").read_text())["windows"] == n


def test_the_trainer_loads_it_as_a_vitaldb_dataset(prepared):
    dataset = load_dataset(prepared)
    assert dataset.meta["source"] == "vitaldb"
    assert dataset.cases.tolist() == sorted(USABLE)


def test_meta_records_the_cases_every_parameter_and_the_package_versions(prepared):
    meta = json.loads((prepared / "meta.json").read_text())
    assert meta["cases"] == sorted(USABLE)
    assert meta["cases_skipped"].keys() == {"14", "15", str(CORRUPT_CASE)}
    assert meta["window_length"] == 100 and meta["sample_rate_hz"] == 100.0
    assert meta["request"]["label_method"] == "nearest"
    assert meta["request"]["label_window_minutes"] == 30.0
    assert meta["request"]["labs_sha256"] == meta["labels"]["labs_sha256"]
    assert meta["signal"]["bandpass_hz"] == [0.5, 8.0]
    assert set(meta["packages"]) == {"python", "vitaldb", "numpy", "scipy"}


def test_skipped_cases_name_their_reason(prepared):
    per_case = json.loads((prepared / "prepare_summary.json").read_text())["per_case"]
    assert per_case["14"]["skipped"] == "no SNUADC/PLETH track"
    assert per_case["15"]["skipped"] == "no glucose draw in the lab table"
    assert per_case[str(CORRUPT_CASE)]["skipped"].startswith("corrupt file")


@pytest.mark.parametrize(
    ("case", "reason", "at_least"),
    [(12, "flat_line", 28), (13, "missing", 20), (17, "clipping", 28), (18, "pulse_rate", 38),
     (19, "unlabelled", 190)],
)  # fmt: skip
def test_rejected_windows_are_counted_by_reason_per_case(prepared, case, reason, at_least):
    counts = json.loads((prepared / "prepare_summary.json").read_text())["per_case"][str(case)]
    assert counts["windows_rejected"][reason] >= at_least
    assert counts["windows_kept"] + sum(counts["windows_rejected"].values()) == RECORDING_S


def test_a_clean_case_keeps_every_window_but_the_guards_at_its_ends(prepared):
    summary = json.loads((prepared / "prepare_summary.json").read_text())["per_case"]["11"]
    assert summary["windows_kept"] == RECORDING_S - 4
    assert summary["windows_rejected"]["missing"] == 4


def test_windows_start_on_whole_seconds_and_skip_the_gap(prepared):
    times = _case(_arrays(prepared), 13)["window_time_s"]
    assert np.array_equal(times, np.round(times))
    assert not ((times > 57) & (times < 82)).any()  # the 60-80 s gap and its 2 s guards
    assert {2.0, 57.0, 82.0, RECORDING_S - 3} <= set(times.tolist())


def test_labels_are_the_nearest_draw_with_its_signed_gap(prepared):
    case = _case(_arrays(prepared), 11)
    centres = case["window_time_s"] + 0.5
    near_first = np.abs(centres - 60) <= np.abs(centres - 200)
    assert np.array_equal(case["glucose"], np.where(near_first, 100.0, 140.0))
    assert np.allclose(case["label_gap_s"], np.where(near_first, 60, 200) - centres)


def test_windows_hold_the_band_passed_pulse(prepared):
    windows = _case(_arrays(prepared), 11)["windows"]  # 72/min
    signal = windows[:60].ravel()  # 60 consecutive seconds
    peak_hz = np.fft.rfftfreq(signal.size, 0.01)[np.abs(np.fft.rfft(signal)).argmax()]
    assert abs(float(signal.mean())) < 0.5
    assert peak_hz == pytest.approx(1.2, abs=0.05)


def test_rerunning_a_finished_preparation_changes_nothing(prepared, vital_dir, capsys):
    before = {
        path.name: (path.read_bytes(), path.stat().st_mtime_ns) for path in prepared.iterdir()
    }
    assert prepare(prepared, "--vital-dir", str(vital_dir), "--labs", str(LABS_CSV)) == 0
    after = {path.name: (path.read_bytes(), path.stat().st_mtime_ns) for path in prepared.iterdir()}
    assert after == before
    assert "already holds this preparation" in capsys.readouterr().err


def test_a_finished_preparation_refuses_other_flags(prepared, vital_dir, capsys):
    args = ("--vital-dir", str(vital_dir), "--labs", str(LABS_CSV), "--label-method", "linear")
    assert prepare(prepared, *args) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "other flags (label_method 'nearest' -> 'linear')" in error


def test_linear_labels_only_windows_between_two_draws(vital_dir, tmp_path):
    cases = copy_cases(vital_dir, tmp_path / "vital", [11])
    out = tmp_path / "out"
    assert (
        prepare(out, "--vital-dir", str(cases), "--labs", str(LABS_CSV), "--label-method", "linear")
        == 0
    )
    arrays = _arrays(out)
    centres = arrays["window_time_s"] + 0.5
    assert centres.min() >= 60 and centres.max() <= 200
    assert np.allclose(arrays["glucose"], 100 + (centres - 60) / 140 * 40)


def test_stride_overlaps_windows(vital_dir, tmp_path):
    cases = copy_cases(vital_dir, tmp_path / "vital", [11])
    out = tmp_path / "out"
    args = ("--vital-dir", str(cases), "--labs", str(LABS_CSV), "--stride-seconds", "0.5")
    assert prepare(out, *args) == 0
    times = np.load(out / "window_time_s.npy")
    assert np.allclose(np.diff(times), 0.5)


def test_nothing_usable_is_one_line_and_exit_2(vital_dir, tmp_path, capsys):
    cases = copy_cases(vital_dir, tmp_path / "vital", [14, 15, CORRUPT_CASE])
    assert prepare(tmp_path / "out", "--vital-dir", str(cases), "--labs", str(LABS_CSV)) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[-1].startswith("error: no usable windows in 3 cases (3 skipped")
    assert "Traceback" not in "\n".join(lines)


def test_a_directory_holding_other_files_is_refused(vital_dir, tmp_path, capsys):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    assert prepare(tmp_path / "out", "--vital-dir", str(vital_dir), "--labs", str(LABS_CSV)) == 2
    assert "is not empty" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--window-seconds", "0.2"), "gives 20 samples; the model needs at least 32"),
        (("--sample-rate", "10"), "must be at least 16 Hz"),
        (("--stride-seconds", "0.333"), "not a whole number of samples"),
    ],
)
def test_bad_parameters_are_one_line_naming_the_flag(vital_dir, tmp_path, capsys, args, message):
    assert prepare(tmp_path / "out", "--vital-dir", str(vital_dir), *args) == 2
    assert message in capsys.readouterr().err.strip().splitlines()[-1]


def test_case_ids_must_be_numbers(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["prepare-vitaldb", "--out", "x", "--cases", "1,five"])
    assert exit_.value.code == 2
    assert "expected case ids separated by commas" in capsys.readouterr().err


def test_training_reports_would_name_it_vitaldb(prepared):
    data = data_identity(load_dataset(prepared))
    assert data["source"] == "vitaldb" and data["cases"] == len(USABLE)


def test_the_heartbeat_steps_once_per_case_prepared_and_per_case_assembled(
    vital_dir, tmp_path, monkeypatch
):
    # What the box's idle watchdog reads while a detached `fab prepare-data` runs.
    seen = []
    write = Workspace.beat

    def beat_and_read(work: Workspace, step: int) -> None:
        write(work, step)
        seen.append(json.loads((work.root / HEARTBEAT).read_text()))

    monkeypatch.setattr(Workspace, "beat", beat_and_read)
    out = tmp_path / "vitaldb"
    began = time.time()
    assert prepare(out, "--vital-dir", str(vital_dir), "--labs", str(LABS_CSV)) == 0
    cases = len(list(vital_dir.glob("*.vital")))
    assembled = len(json.loads((out / "meta.json").read_text())["cases"])
    assert [beat["step"] for beat in seen] == list(range(1, cases + assembled + 1))
    assert all(began <= beat["updated_at"] <= time.time() for beat in seen)
    assert not (out / ".prepare").exists()  # gone with the work dir: nothing left to read
