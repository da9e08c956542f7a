"""`prepare-vitaldb --cases / --milestone`: the same files fetched from the open
dataset's HTTP layout, tables included (served from 127.0.0.1 by
tests/fixtures/vitaldb_cases.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fixtures.vitaldb_cases import LABS_CSV, copy_cases
from trainer.__main__ import main
from trainer.data.vitaldb import opendata


def prepare(out: Path, *args: str) -> int:
    return main(["prepare-vitaldb", "--out", str(out), "--workers", "1", *args])


@pytest.fixture(scope="module")
def milestone(open_data, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("online") / "vitaldb-m1"
    assert prepare(out, "--milestone", "M1", "--source-url", open_data.url) == 0
    return out


def test_milestone_takes_the_cases_listed_with_pleth_and_a_glucose_draw(milestone):
    summary = json.loads((milestone / "prepare_summary.json").read_text())
    # trks lists PLETH for 11, 12, 13, 15, 17, 20; 15 has no draw in the labs table.
    assert sorted(map(int, summary["per_case"])) == [11, 12, 13, 17, 20]


def test_a_case_the_server_does_not_have_is_skipped_with_the_http_status(milestone):
    skipped = json.loads((milestone / "meta.json").read_text())["cases_skipped"]
    assert skipped.keys() == {"20"}
    assert skipped["20"].startswith("download failed: ") and "HTTP 404" in skipped["20"]


def test_meta_names_the_open_dataset_and_the_fetched_lab_table(milestone, open_data):
    meta = json.loads((milestone / "meta.json").read_text())
    assert meta["open_dataset"]["url"] == open_data.url
    assert meta["request"]["milestone"] == "M1"
    assert meta["labels"]["labs_sha256"]  # of the table as fetched


def test_fetched_cases_give_the_windows_of_the_same_files_on_disk(milestone, vital_dir, tmp_path):
    local = tmp_path / "local"
    cases = copy_cases(vital_dir, tmp_path / "vital", [11, 12, 13, 17])
    assert prepare(local, "--vital-dir", str(cases), "--labs", str(LABS_CSV)) == 0
    for name in ("windows.npy", "glucose.npy", "case_id.npy", "label_gap_s.npy"):
        assert (milestone / name).read_bytes() == (local / name).read_bytes(), name


def test_cases_by_id_are_fetched_and_nothing_is_left_behind(open_data, tmp_path):
    out = tmp_path / "by-id"
    assert prepare(out, "--cases", "18,11", "--source-url", open_data.url) == 0
    assert json.loads((out / "meta.json").read_text())["cases"] == [11, 18]
    assert not (out / ".prepare").exists()


def test_an_unreachable_source_is_one_line_naming_the_table(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(opendata, "RETRY_FIRST_WAIT_SECONDS", 0.0)  # same tries, no waits
    url = "http://127.0.0.1:9"  # discard port: nothing listens
    assert prepare(tmp_path / "out", "--cases", "11", "--source-url", url) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("error: cannot fetch the labs table") and "--labs" in error


def test_vital_dir_without_labs_says_the_lab_table_comes_from_the_network(
    open_data, vital_dir, tmp_path, capsys
):
    cases = copy_cases(vital_dir, tmp_path / "vital", [11, 12])
    assert prepare(tmp_path / "out", "--vital-dir", str(cases), "--source-url", open_data.url) == 0
    said = capsys.readouterr().err
    assert f"--vital-dir without --labs: the lab table comes from {open_data.url}/labs" in said
    assert "--labs FILE.csv: offline" in said


def test_vital_dir_without_labs_and_no_lab_table_to_fetch_is_one_line_naming_labs(
    open_data, vital_dir, tmp_path, capsys
):
    cases = copy_cases(vital_dir, tmp_path / "vital", [11])
    offline = f"{open_data.url}/nothing-here"  # answers 404: no retries to wait out
    assert prepare(tmp_path / "out", "--vital-dir", str(cases), "--source-url", offline) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("error: cannot fetch the labs table")
    assert "pass --labs FILE.csv (caseid,dt,name,result) to work offline" in error
