"""`prepare-vitaldb`: resolve the cases, prepare each once (in worker processes), then
assemble the dataset; resumable at any point.

State lives in `<out>/.prepare/`: `request.json` (the flags, which a resume must
repeat), `cases.json` (the resolved case list), `tables/` (lab table and track list
as fetched), `downloads/` (case files being fetched), `shards/` (one `.npz` and
one `.json` per finished case) and `heartbeat.json` (`{"step", "updated_at"}`, a
step per case prepared and per case assembled: on the box, the idle watchdog counts
the preparation's container as busy while the step moves, and a hung one not). A
killed run started again with the same flags skips the finished cases and ends with
the same bytes as an uninterrupted one; once the dataset is assembled the state is
removed, and asking again for a finished preparation changes nothing.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import platform
import re
import shutil
import sys
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from box.contract import PREPARE_HEARTBEAT
from trainer.atomic_write import write_json_atomic
from trainer.config import UserError
from trainer.container_env import host_path
from trainer.data.vitaldb import opendata, waveform
from trainer.data.vitaldb.assemble import META, SUMMARY, assemble
from trainer.data.vitaldb.case import CaseJob, prepare_case, summary_path
from trainer.data.vitaldb.config import MILESTONE_CASES, PrepareConfig
from trainer.data.vitaldb.lab_table import (
    GLUCOSE_LAB_NAME,
    GLUCOSE_PLAUSIBLE_MG_DL,
    PLETH_TRACK,
    LabTable,
    cases_with_pleth,
    read_glucose_draws,
)

# Its resume state and the heartbeat the box reads: the box's contract.
WORK_DIR, HEARTBEAT = PREPARE_HEARTBEAT
VITAL_FILE = re.compile(r"^(\d+)\.vital$")
PACKAGES = ("vitaldb", "numpy", "scipy")


@dataclass(frozen=True)
class Outcome:
    windows: int
    cases: int
    skipped: int
    already_done: bool


@dataclass(frozen=True)
class Workspace:
    out: Path

    @property
    def root(self) -> Path:
        return self.out / WORK_DIR

    @property
    def shards(self) -> Path:
        return self.root / "shards"

    @property
    def tables(self) -> Path:
        return self.root / "tables"

    @property
    def downloads(self) -> Path:
        return self.root / "downloads"

    def beat(self, step: int) -> None:
        """Say the preparation moved on (box/busy_signals.py reads it)."""
        write_json_atomic(self.root / HEARTBEAT, {"step": step, "updated_at": time.time()})


def _say(message: str) -> None:
    print(f"prepare-vitaldb: {message}", file=sys.stderr, flush=True)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _differences(old: dict, new: dict) -> str:
    keys = sorted(key for key in old.keys() | new.keys() if old.get(key) != new.get(key))
    return "; ".join(f"{key} {old.get(key)!r} -> {new.get(key)!r}" for key in keys)


def _already_done(out: Path, request: dict) -> bool:
    """Whether `out` holds this very preparation, finished; refuse any other dataset."""
    meta_path = out / META
    if not meta_path.is_file():
        return False
    meta = json.loads(meta_path.read_text())
    if meta.get("source") != "vitaldb":
        raise UserError(f"--out {out} holds another dataset ({meta_path}); pick another --out")
    if meta.get("request") != request:
        raise UserError(
            f"--out {out} holds a VitalDB preparation made with other flags "
            f"({_differences(meta.get('request', {}), request)}); pick another --out"
        )
    return True


def _claim(work: Workspace, request: dict) -> None:
    """Start the preparation in `out`, or check that a resume asks for the same."""
    request_path = work.root / "request.json"
    if request_path.is_file():
        old = json.loads(request_path.read_text())
        if old != request:
            raise UserError(
                f"--out {work.out} holds an unfinished preparation with other flags "
                f"({_differences(old, request)}); repeat its flags to resume it, "
                "or pick another --out"
            )
        return
    if work.out.is_dir() and any(path.name != WORK_DIR for path in work.out.iterdir()):
        raise UserError(f"--out {work.out} is not empty; pick a new or empty directory")
    for directory in (work.shards, work.tables, work.downloads):
        directory.mkdir(parents=True, exist_ok=True)
    write_json_atomic(request_path, request)


def _table(config: PrepareConfig, work: Workspace, name: str) -> Path:
    """The API's table `name`, fetched once per preparation (a resume reuses it)."""
    path = work.tables / name
    if not path.is_file():
        url = opendata.table_url(config.source_url, name)
        _say(f"fetching {url}")
        try:
            opendata.download(url, path)
        except opendata.DownloadError as error:
            offline = " pass --labs FILE.csv (caseid,dt,name,result) to work offline, or"
            raise UserError(
                f"cannot fetch the {name} table ({error});"
                + (offline if name == "labs" else "")
                + " check --source-url"
            ) from None
    return path


def _lab_table(config: PrepareConfig, work: Workspace) -> Path:
    """--labs, else the API's table: fetched for --vital-dir too, which says so."""
    if config.labs is not None:
        return config.labs
    if not config.online:
        url = opendata.table_url(config.source_url, "labs")
        _say(
            f"--vital-dir without --labs: the lab table comes from {url} (--labs FILE.csv: offline)"
        )
    return _table(config, work, "labs")


def _local_cases(vital_dir: Path) -> list[int]:
    cases = sorted(
        int(match.group(1))
        for path in Path(vital_dir).iterdir()
        if (match := VITAL_FILE.match(path.name))
    )
    if not cases:
        raise UserError(f"--vital-dir {vital_dir}: no <caseid>.vital files (e.g. 1.vital)")
    return cases


def _milestone_cases(config: PrepareConfig, work: Workspace, labs: LabTable) -> list[int]:
    wanted = MILESTONE_CASES[config.milestone]
    eligible = sorted(cases_with_pleth(_table(config, work, "trks")) & set(labs.draws))
    if len(eligible) < wanted:
        _say(
            f"{config.milestone} asks for {wanted} cases; the dataset has only "
            f"{len(eligible)} with a {PLETH_TRACK} track and a glucose draw: taking them all"
        )
    return eligible[:wanted]


def _cases(config: PrepareConfig, work: Workspace, labs: LabTable) -> list[int]:
    """The case ids, resolved once and kept: a resume prepares the same list."""
    path = work.root / "cases.json"
    if path.is_file():
        return json.loads(path.read_text())
    if config.vital_dir is not None:
        cases = _local_cases(config.vital_dir)
    elif config.cases:
        cases = sorted(set(config.cases))
    else:
        cases = _milestone_cases(config, work, labs)
    write_json_atomic(path, cases)
    return cases


def _job(config: PrepareConfig, work: Workspace, labs: LabTable, case_id: int) -> CaseJob:
    local = config.vital_dir is not None
    return CaseJob(
        case_id=case_id,
        draws=labs.draws.get(case_id),
        vital_path=(Path(config.vital_dir) if local else work.downloads) / f"{case_id}.vital",
        download_url=None if local else opendata.case_url(config.source_url, case_id),
        shard_dir=work.shards,
        window_length=config.window_length,
        stride=config.stride_samples,
        sample_rate=config.sample_rate,
        label_method=config.label_method,
        label_limit_s=config.label_window_minutes * 60.0,
    )


def _run(jobs: list[CaseJob], workers: int) -> Iterator[dict]:
    """Each job's summary as it finishes; `workers` processes (or this one)."""
    if workers <= 1 or len(jobs) <= 1:
        yield from map(prepare_case, jobs)
        return
    # spawn: workers share nothing with this process but the job they are sent.
    context = multiprocessing.get_context("spawn")
    try:
        with ProcessPoolExecutor(min(workers, len(jobs)), mp_context=context) as pool:
            for done in as_completed([pool.submit(prepare_case, job) for job in jobs]):
                yield done.result()
    except BrokenProcessPool:
        raise UserError(
            "a worker process died (killed, or out of memory on a long case); the cases "
            "it finished are kept: run the same command again, with fewer --workers if "
            "memory is short"
        ) from None


def _describe(summary: dict) -> str:
    if "skipped" in summary:
        return f"case {summary['case']}: skipped: {summary['skipped']}"
    rejected = {reason: n for reason, n in summary["windows_rejected"].items() if n}
    reasons = ", ".join(f"{n} {reason}" for reason, n in rejected.items()) or "none"
    return f"case {summary['case']}: {summary['windows_kept']} windows kept; rejected: {reasons}"


def _prepare_cases(work: Workspace, jobs: list[CaseJob], workers: int, total: int) -> None:
    started, done = time.monotonic(), total - len(jobs)
    for summary in _run(jobs, workers):
        done += 1
        work.beat(done)
        per_minute = (done - (total - len(jobs))) / max(time.monotonic() - started, 1e-9) * 60
        _say(f"[{done}/{total}, {per_minute:.1f} cases/min] {_describe(summary)}")


def _summary(summaries: list[dict]) -> dict:
    rejected: Counter[str] = Counter()
    for summary in summaries:
        rejected.update(summary.get("windows_rejected", {}))
    skips = Counter(summary["skipped"] for summary in summaries if "skipped" in summary)
    return {
        "cases": len(summaries),
        "cases_with_windows": sum(1 for s in summaries if s.get("windows_kept")),
        "cases_skipped": sum(skips.values()),
        "windows_kept": sum(s.get("windows_kept", 0) for s in summaries),
        "windows_rejected": {reason: rejected[reason] for reason in waveform.REJECT_REASONS},
        "skip_reasons": dict(sorted(skips.items())),
        "per_case": {str(s["case"]): s for s in summaries},
    }


def _meta(config: PrepareConfig, request: dict, summary: dict, labs: LabTable, labs_sha: str):
    online = config.online
    return {
        "source": "vitaldb",
        "windows": summary["windows_kept"],
        "window_length": config.window_length,
        "sample_rate_hz": config.sample_rate,
        "window_seconds": config.window_seconds,
        "stride_seconds": config.stride_samples / config.sample_rate,
        "glucose_unit": "mg/dL",
        "cases": [int(case) for case, s in summary["per_case"].items() if s.get("windows_kept")],
        "cases_skipped": {
            case: s["skipped"] for case, s in summary["per_case"].items() if "skipped" in s
        },
        "window_time_s": "window start, seconds from the recording's start (.vital dtstart)",
        "label_gap_s": "glucose draw time minus window centre, seconds",
        "labels": {
            "method": config.label_method,
            "window_minutes": config.label_window_minutes,
            "lab_name": GLUCOSE_LAB_NAME,
            "plausible_mg_dl": list(GLUCOSE_PLAUSIBLE_MG_DL),
            "ignored_lab_rows": labs.ignored_rows,
            "labs_sha256": labs_sha,
        },
        "signal": {"track": PLETH_TRACK, **waveform.quality_settings()},
        "open_dataset": (
            {"url": config.source_url, "file_version": opendata.dataset_version()}
            if online
            else None
        ),
        "request": request,
        "packages": {
            "python": platform.python_version(),
            **{name: metadata.version(name) for name in PACKAGES},
        },
    }


def _read_summaries(work: Workspace, cases: Iterable[int]) -> list[dict]:
    return [json.loads(summary_path(work.shards, case).read_text()) for case in cases]


def prepare_vitaldb(config: PrepareConfig) -> Outcome:
    """Prepare (or resume, or find finished) the dataset `config` asks for."""
    out = Path(config.out)
    request = {**config.request(), "labs_sha256": _sha256(config.labs) if config.labs else None}
    if _already_done(out, request):
        meta = json.loads((out / META).read_text())
        _say(f"{host_path(out)} already holds this preparation; nothing to do")
        return Outcome(meta["windows"], len(meta["cases"]), len(meta["cases_skipped"]), True)
    work = Workspace(out)
    _claim(work, request)
    labs_path = _lab_table(config, work)
    labs = read_glucose_draws(labs_path)
    cases = _cases(config, work, labs)
    pending = [case for case in cases if not summary_path(work.shards, case).is_file()]
    if len(pending) < len(cases):
        _say(f"resuming: {len(cases) - len(pending)} of {len(cases)} cases already prepared")
    jobs = [_job(config, work, labs, case) for case in pending]
    _prepare_cases(work, jobs, config.workers, len(cases))
    summaries = _read_summaries(work, cases)
    summary = _summary(summaries)
    if summary["windows_kept"] == 0:
        write_json_atomic(out / SUMMARY, summary)
        raise UserError(
            f"no usable windows in {len(cases)} cases ({summary['cases_skipped']} skipped, "
            f"the rest rejected); see {out / SUMMARY}"
        )
    kept = [(s["case"], s["windows_kept"]) for s in summaries if s.get("windows_kept")]
    labs_sha = request["labs_sha256"] or _sha256(labs_path)
    meta = _meta(config, request, summary, labs, labs_sha)
    _say(f"assembling {summary['windows_kept']} windows from {len(kept)} cases")
    assemble(
        out, work.shards, kept, config.window_length, summary, meta,
        case_done=lambda assembled: work.beat(len(cases) + assembled),
    )  # fmt: skip
    shutil.rmtree(work.root)
    return Outcome(summary["windows_kept"], len(kept), summary["cases_skipped"], False)
