"""Small `.vital` cases written with the vitaldb package's own writer, a lab table to
label them, and the open dataset's HTTP layout served from 127.0.0.1.

Every case records RECORDING_S seconds of PLETH at 500 Hz (labs.csv holds the draws):

| case | what it holds | expected |
|---|---|---|
| 11 | clean pulse at 72/min; draws at 60 s (100) and 200 s (140) | all kept but the edges |
| 12 | 90/min, flat line 100-130 s; two draws at 120 s (150, 154) | flat_line there |
| 13 | 60/min, gap 60-80 s; one draw at 0 s | missing there |
| 14 | no PLETH track | skipped |
| 15 | clean, no glucose draw | skipped |
| 16 | the first half of a gzip stream (a copy cut short) | skipped: corrupt |
| 17 | 80/min, clipped 150-180 s; draw at 100 s (5000 ignored) | clipping there |
| 18 | 75/min, 300/min from 40 to 80 s | pulse_rate there |
| 19 | clean; one draw at 2000 s | unlabelled before 200 s (30 min away) |
"""

from __future__ import annotations

import gzip
import shutil
import sys
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest

from tests.local_server import ServerProcess
from trainer.vitaldb.opendata import dataset_version
from trainer.vitaldb.synthetic_case import Defect, write_case

RECORDING_S = 240.0
LABS_CSV = Path(__file__).with_name("labs.csv")
CASES = {
    11: {"pulse_bpm": 72.0},
    12: {"pulse_bpm": 90.0, "defects": [Defect("flat", 100, 130)]},
    13: {"pulse_bpm": 60.0, "defects": [Defect("gap", 60, 80)]},
    14: {"with_pleth": False},
    15: {"pulse_bpm": 70.0},
    17: {"pulse_bpm": 80.0, "defects": [Defect("clip", 150, 180)]},
    18: {"pulse_bpm": 75.0, "defects": [Defect("fast_pulse", 40, 80)]},
    19: {"pulse_bpm": 66.0},
}
CORRUPT_CASE = 16
USABLE = (11, 12, 13, 17, 18, 19)


@pytest.fixture(scope="session")
def vital_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("vital")
    for case, spec in CASES.items():
        write_case(directory / f"{case}.vital", RECORDING_S, seed=case, **spec)
    whole = (directory / "11.vital").read_bytes()
    (directory / f"{CORRUPT_CASE}.vital").write_bytes(whole[: len(whole) // 2])
    return directory


def copy_cases(source: Path, destination: Path, cases) -> Path:
    destination.mkdir(parents=True, exist_ok=True)
    for case in cases:
        shutil.copy(source / f"{case}.vital", destination / f"{case}.vital")
    return destination


@dataclass(frozen=True)
class OpenDataServer:
    url: str
    root: Path


TRKS_ROWS = [  # caseid,tname,tid as the API lists them
    (11, "SNUADC/PLETH"), (11, "Solar8000/HR"), (12, "SNUADC/PLETH"), (13, "SNUADC/PLETH"),
    (14, "Solar8000/HR"), (15, "SNUADC/PLETH"), (17, "SNUADC/PLETH"), (20, "SNUADC/PLETH"),
]  # fmt: skip


def _http_server(root: Path, port: int) -> list[str]:
    return [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "-d", str(root), str(port)]


@pytest.fixture(scope="session")
def open_data(vital_dir, tmp_path_factory) -> OpenDataServer:
    """The API's layout over HTTP on 127.0.0.1: gzipped CSV tables with a BOM, as the
    real one serves them, and `<version>/<caseid>.vital`. Case 20 is listed with a
    PLETH track but has no file (HTTP 404)."""
    root = tmp_path_factory.mktemp("api")
    copy_cases(vital_dir, root / dataset_version(), [*CASES, CORRUPT_CASE])
    trks = "caseid,tname,tid\n" + "".join(
        f"{c},{t},{c:04d}{i}\n" for i, (c, t) in enumerate(TRKS_ROWS)
    )
    (root / "trks").write_bytes(gzip.compress(("\ufeff" + trks).encode()))
    (root / "labs").write_bytes(gzip.compress(("\ufeff" + LABS_CSV.read_text()).encode()))
    server = ServerProcess("open-data", partial(_http_server, root), root.parent / "server.log")
    server.start()
    yield OpenDataServer(url=f"http://127.0.0.1:{server.port}", root=root)
    server.stop()
