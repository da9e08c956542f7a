"""Generated run folders, some with a record no view can read (NaN, Infinity, integers
of hundreds of digits, values of the wrong type, files nested past what json follows,
torn or of the wrong shape), all with text a terminal or rich could act on (markup,
escape sequences, control characters) where a run may put text: `fab runs`, `fab
status` and `fab tensorboard`'s gatherer show every run, say each bad record in one
line, and let nothing through raw.

Real parts: `file://` stores, the local target's box root on this machine and its
Docker engine (`fab status` asks it for the run's container), the tasks themselves.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from invoke import Context

from box import contract
from ops.run import look
from ops.runs import run_cache
from ops.target.resolve import resolve_target
from ops.tasks.runs import runs as fab_runs

FAST = settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

ACTING_TEXT = st.sampled_from([
    "x[/bold]", "[link=https://evil.example/]y[/link]", "\x1b]52;c;aGk=\x07", "\x1b]0;t\x07",
    "\x1b[2J", "a\u202eb", "\r\n", "\x9b2J", ":smile:", "\\x1b",
])  # fmt: skip
TEXT = st.one_of(ACTING_TEXT, st.text(max_size=12))
HUGE = st.sampled_from([10**400, -(10**300), 2**64])
NOT_FINITE = st.sampled_from([math.nan, math.inf, -math.inf])
"""Values no float field reads."""
ANY_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | TEXT | HUGE,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)
GARBAGE = st.sampled_from(["{torn", "[" * 50_000, "[1, 2]", "7", '"text"'])
"""Files no record reads as a whole: torn, nested too deep, another shape."""


def _wrong_for(reader: object) -> st.SearchStrategy:
    """A value the field's reader refuses (contract._Record.READERS)."""
    expected = reader.expected
    wrong = {
        "a whole number": NOT_FINITE | HUGE | st.just(1.5) | st.just(True) | TEXT,
        "a finite number": NOT_FINITE | st.just(10**400) | st.just(True) | TEXT,
        "text": st.integers() | st.booleans() | st.lists(st.integers(), max_size=2),
        "true or false": st.integers() | TEXT,
        "an object": st.integers() | TEXT | st.lists(st.integers(), max_size=2),
        "a list": st.integers() | TEXT | st.dictionaries(TEXT, st.integers(), max_size=2),
    }
    return wrong[expected].filter(lambda value: value is not None)


def _good(record: type) -> st.SearchStrategy:
    """A record every field of which its reader keeps (or leaves out), its text hostile."""
    kinds = {
        "a whole number": st.integers(-(2**40), 2**40),
        "a finite number": st.floats(-1e9, 1e9, allow_nan=False) | st.integers(0, 10**6),
        "text": TEXT,
        "true or false": st.booleans(),
        "an object": st.dictionaries(TEXT, ANY_JSON, max_size=3),
        "a list": st.lists(ANY_JSON, max_size=3),
    }
    fields = {name: kinds[reader.expected] for name, reader in record.READERS.items()}
    fields.pop("state", None)
    return st.fixed_dictionaries({}, optional=fields)


@st.composite
def bad_text(draw, record: type) -> str:
    """The text of a file of `record` no view can read all of: a field it refuses, or
    the whole file."""
    if draw(st.booleans()):
        return draw(GARBAGE)
    data = draw(_good(record))
    name = draw(st.sampled_from(sorted(record.READERS)))
    data[name] = draw(_wrong_for(record.READERS[name]))
    return json.dumps(data)


@dataclass
class Folder:
    """A run's files as written, and which of its records no view can read."""

    files: dict[str, str] = field(default_factory=dict)
    bad: list[str] = field(default_factory=list)


TYPED = (contract.RunRecord, contract.LaunchRecord, contract.RunSummary)


@st.composite
def folders(draw) -> Folder:
    folder = Folder()
    status = draw(_good(contract.RunRecord))
    status["state"] = draw(st.sampled_from(contract.STATES))
    folder.files[contract.STATUS_FILE] = json.dumps(status)
    for record in (contract.LaunchRecord, contract.RunSummary):
        if draw(st.booleans()):
            folder.files[record.FILE] = json.dumps(draw(_good(record)))
    config = draw(st.dictionaries(st.sampled_from(["data", "train", "optim"]), ANY_JSON))
    folder.files[contract.CONFIG_FILE] = json.dumps(config)
    lines = draw(st.lists(ANY_JSON.map(json.dumps) | TEXT, max_size=3))
    folder.files[contract.METRICS_FILE] = "\n".join(lines)
    if draw(st.booleans()):  # one record no view can read
        record = draw(st.sampled_from(TYPED))
        folder.files[record.FILE] = draw(bad_text(record))
        folder.bad.append(record.FILE)
    return folder


def _write(root: Path, found: dict[str, Folder]) -> None:
    for run_id, folder in found.items():
        for name, text in folder.files.items():
            path = root / run_id / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)


def _said(run: object) -> tuple[str, str]:
    """stdout and stderr of `run()`, which must end normally (exit 0)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        run()
    return out.getvalue(), err.getvalue()


def _assert_nothing_acts(text: str) -> None:
    for raw in ("\x1b", "\x07", "\x9b", "\u202e", "\r"):
        assert raw not in text, text


def _no_such(constant: str) -> None:
    raise AssertionError(f"{constant} is no JSON")


def _target(root: Path) -> Path:
    target = root / "here.json"
    target.write_text(json.dumps({"boxRoot": str(root / "box"),
                                  "storageUri": f"file://{root / 'storage'}"}))  # fmt: skip
    return target


RUNS = st.dictionaries(st.sampled_from([f"r{n:02d}" for n in range(8)]), folders(), max_size=5)


@FAST
@given(found=RUNS)
def test_fab_runs_shows_every_run_and_says_each_bad_record_once(found):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _write(root / "storage" / "runs", found)
        (root / "none").mkdir()
        where = {"local": str(root / "none"), "target": str(_target(root))}
        out, err = _said(lambda: fab_runs(Context(), **where))
        listed, _ = _said(lambda: fab_runs(Context(), json=True, **where))
    assert sorted(row["run_id"] for row in json.loads(listed, parse_constant=_no_such)["runs"]) == (
        sorted(found)
    )  # JSON a strict parser takes: no NaN
    _assert_nothing_acts(out + err)
    for run_id, folder in found.items():
        assert run_id in out
        said = [line for line in err.splitlines() if line.startswith(f"note: run {run_id}:")]
        assert len(said) == len(folder.bad), (run_id, folder, err)
        for name in folder.bad:
            assert name in said[0]


@FAST
@given(found=RUNS)
def test_the_tensorboard_gatherer_takes_every_run_and_notes_each_bad_record_once(found):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _write(root / "runs", found)
        gathered = run_cache.gather(None, [root / "runs"], root / "cache")
    assert gathered.run_ids == sorted(found)
    for run_id, folder in found.items():
        said = [note for note in gathered.notes if note.startswith(f"run {run_id}:")]
        assert len(said) == len(folder.bad), (run_id, folder, gathered.notes)


@pytest.fixture(scope="module")
def box_root(docker_engine, tmp_path_factory) -> tuple[Path, object]:
    """The local target (this machine, its Docker engine) with a box root of its own."""
    root = tmp_path_factory.mktemp("hostile-status")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GLUCOSE_TARGET", str(_target(root)))
        target = resolve_target(None, None)
    return root / "box", target


WATCHDOG = st.dictionaries(
    st.sampled_from(["stop_failures", "stop_error", "busy_reasons", "stop_at", "signals",
                     "stop_requested_at"]), ANY_JSON, max_size=4)  # fmt: skip


@settings(FAST, max_examples=8)
@given(folder=folders(), watchdog=WATCHDOG, stops=st.lists(ANY_JSON, max_size=2))
def test_fab_status_shows_the_run_and_says_each_bad_record_once(box_root, folder, watchdog,
                                                                 stops):  # fmt: skip
    root, target = box_root
    folder.files.pop(contract.SUMMARY_FILE, None)  # `fab status` reads the box, not a summary
    folder.bad = [name for name in folder.bad if name != contract.SUMMARY_FILE]
    _write(root / contract.RUNS_DIR, {"r-status": folder})
    records = root / contract.WATCHDOG_DIR
    records.mkdir(parents=True, exist_ok=True)
    (records / "state.json").write_text(json.dumps(watchdog))
    lines = [json.dumps({"at": 1.79e9, "summary": stop}) for stop in stops]
    (records / contract.STOPS_FILE).write_text("\n".join(lines))
    view = look.look(target, "r-status")
    shown = view.render()
    json.dumps(view.to_json())
    _assert_nothing_acts(shown)
    assert "run:        r-status" in shown
    unread = [line for line in shown.splitlines() if line.startswith("unread:")]
    assert len(unread) == len(folder.bad), (folder, shown)
    for name in folder.bad:
        assert name in unread[0]
    for name in folder.files:
        os.remove(root / contract.RUNS_DIR / "r-status" / name)
