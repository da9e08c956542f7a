"""The entrypoint loads the mounted environment file before any command runs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trainer.__main__ import main
from trainer.container_env import ENV_FILE_VARIABLE, parse, render


def test_the_file_round_trips_values_literally() -> None:
    env = {"AZURE_STORAGE_CONNECTION_STRING": "A=b;C=d==", "EMPTY": "", "Q": "'\"$x`"}
    assert parse(render(env)) == env


def test_the_entrypoint_loads_the_file_before_the_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env_file = tmp_path / "env"
    env_file.write_text(render({"GLUCOSE_TEST_SECRET": "from-the-file"}))
    monkeypatch.setenv(ENV_FILE_VARIABLE, str(env_file))
    monkeypatch.setenv("GLUCOSE_TEST_SECRET", "from-docker")  # the file wins, as --env did
    argv = ["synth", "--out", str(tmp_path / "d"), "--cases", "3", "--windows-per-case", "1"]
    assert main(argv) == 0
    assert os.environ["GLUCOSE_TEST_SECRET"] == "from-the-file"


def test_a_missing_file_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setenv(ENV_FILE_VARIABLE, str(tmp_path / "absent"))
    argv = ["synth", "--out", str(tmp_path / "d"), "--cases", "3", "--windows-per-case", "1"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {ENV_FILE_VARIABLE}=") and "\n" not in err
