"""Every run of a stack, gathered into one local folder that one TensorBoard reads.

`fab tensorboard` (no `--run`) reads storage, not a box: the runs' `tb/` event files and
the JSON that says what they were (`config.json`, `summary.json`, `launch.json`) come
from `<storageUri>/runs/` and from the local `runs/` (`fab download`) and `demo/runs/`,
whether the boxes are up or not. Each run becomes a folder of the cache named as
TensorBoard lists it: the run's `--name` where it has one (and no other run shares it),
else its id, a sweep's trial led by its number (`label`). In it, its event files, and a
folder of HParams summaries (ops.runs.hparams) written here from its JSON, so runs that
ended before this existed are compared too. A folder of a run no longer listed, or
listed under another label, goes.

Gathered again while TensorBoard serves, the cache changes only as TensorBoard reads
on: an event file that grew in storage grows here (what it gained, appended: TensorBoard
reads on from where it stopped in the file it holds open, and would never see a file
put in its place), and HParams that changed come in a folder of their own (TensorBoard
keeps a run's first summary of a tag for good; the folder it replaces goes, and with
it that run). An event file comes again only when the store's listing says it changed
(`versions.json` keeps what each copy came from). A run in both places is taken from
storage (the newer).
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from box.contract import TB_DIR, RunSummary
from ops.runs.hparams import final_metrics, session_file, write_experiment, write_hparams
from ops.runs.listing import differing, sources
from ops.runs.records import SUMMARY, RunRow, read_run, run_ids
from trainer.storage import ObjectNotFound, ObjectStore, open_store
from trainer.storage.local_paths import UnsafeKey, local_path

TB_FOLDER = f"{TB_DIR}/"
LABEL_CHARACTERS = re.compile(r"[^A-Za-z0-9 _.+-]")
MAX_LABEL_CHARS = 48
APPEND_BLOCK_BYTES = 4 * 1024 * 1024
"""One ranged read of what an event file gained."""
SAME_START_BYTES = 4096
"""Compared to tell a grown event file from one written anew."""
VERSIONS_FILE = "versions.json"
"""In the cache (not a run's folder): the store version each event file came from."""


@dataclass
class Gathered:
    run_ids: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """What could not be read (a source down, a refused key), one line each."""


def gather(storage_uri: str | None, local: list[Path], cache: Path) -> Gathered:
    """Bring every run's event files and HParams into `cache`; the run ids, sorted."""
    work = _Gathering(cache, _read_versions(cache))
    listed = _listed(storage_uri, local, work.gathered.notes)
    work.run_ids = {run_id for *_, run_id in listed}
    rows, finals = [], []
    for store, prefix, where, run_id in listed:
        try:
            row, summary = work.one(store, prefix, where, run_id)
        except Exception as error:  # the box writes the bucket: one run never hides the rest
            work.gathered.notes.append(
                f"run {run_id} left out: {type(error).__name__}: {error}"[:300]
            )
            continue
        rows.append(row)
        finals.append(final_metrics(summary))
        work.gathered.notes += row.notes()
    (cache / VERSIONS_FILE).write_text(json.dumps(work.versions, indent=1, sort_keys=True))
    write_experiment(cache, rows, differing(rows), finals)
    _remove_stale(cache, set(work.labels.values()))
    work.gathered.run_ids = sorted(work.run_ids)
    return work.gathered


def _listed(
    storage_uri: str | None, local: list[Path], notes: list[str]
) -> list[tuple[ObjectStore, str, str, str]]:
    """(store, prefix, where, run id) of every run, from the first place that has it."""
    listed, seen = [], set()
    for uri, prefix, where in sources(storage_uri, local):
        try:
            store = open_store(uri)
            found = [run_id for run_id in run_ids(store, prefix) if run_id not in seen]
        except Exception as error:  # one source down must not hide the other
            notes.append(f"{where} not read ({uri}): {type(error).__name__}: {error}")
            continue
        listed += [(store, prefix, where, run_id) for run_id in found]
        seen.update(found)
    return listed


def label(name: str, run_id: str, sweep: str | None = None) -> str:
    """What TensorBoard lists a run as: its name where given and fit for a folder's name
    (the bucket is the box's to write), else its id. A sweep's trial leads with its
    number (`t002 lr-search`, not `lr-search t002`): HParams' Trial ID column is 10em
    wide (TensorBoard's `tf-hparams-table-view`), a dozen characters, and the trials of a
    sweep share everything after them."""
    if sweep and run_id.startswith(f"{sweep}-t"):
        number = run_id[len(sweep) + 1 :]
        base = name[: -len(number)].strip() if name.endswith(f" {number}") else name
        name = f"{number} {base or sweep}"
    shown = " ".join(LABEL_CHARACTERS.sub("_", name or "").split())[:MAX_LABEL_CHARS].strip()
    return shown if shown[:1].isalnum() else run_id


def _remove_stale(cache: Path, kept: set[str]) -> None:
    """Folders of ours (an HParams session in them) that no listed run has now."""
    for folder in cache.iterdir():
        if folder.name not in kept and folder.is_dir() and session_file(folder) is not None:
            shutil.rmtree(folder, ignore_errors=True)


@dataclass
class _Gathering:
    """One gather: the cache, what each copy came from, each run's folder."""

    cache: Path
    versions: dict[str, str]
    gathered: Gathered = field(default_factory=Gathered)
    labels: dict[str, str] = field(default_factory=dict)
    """Run id -> its folder in the cache."""
    run_ids: set[str] = field(default_factory=set)
    """Every run listed: a name that is another run's id is no label."""

    def one(
        self, store: ObjectStore, prefix: str, where: str, run_id: str
    ) -> tuple[RunRow, dict | None]:
        """One run into the folder of its label: its changed event files, its HParams;
        its row and summary."""
        folder = f"{prefix}{run_id}/"
        row, summary = read_run(store, run_id, prefix, where), _summary(store, folder)
        shown = label(row.name, run_id, row.sweep)
        if shown != run_id and (shown in self.run_ids or shown in self.labels.values()):
            shown = run_id  # a name two runs share, or another run's id
        self.labels[run_id] = shown
        _gather_run(store, folder, self.cache / shown, self.versions, self.gathered.notes)
        write_hparams(self.cache / shown, row, summary)
        return row, summary


def _read_versions(cache: Path) -> dict[str, str]:
    cache.mkdir(parents=True, exist_ok=True)
    try:
        versions = json.loads((cache / VERSIONS_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return versions if isinstance(versions, dict) else {}


def _gather_run(
    store: ObjectStore, folder: str, into: Path, versions: dict[str, str], notes: list[str]
) -> None:
    """The run's `tb/` files that changed since the last gather, into `into`."""
    into.mkdir(parents=True, exist_ok=True)
    for key, info in store.list_info(f"{folder}{TB_FOLDER}").items():
        name = key[len(folder) + len(TB_FOLDER) :]
        seen_as = f"{into.name}/{name}"
        try:
            path = local_path(into, name)
        except UnsafeKey as error:  # the bucket is the box's to write: data, not a path
            notes.append(f"skipped {key}: {error}")
            continue
        if versions.get(seen_as) == info.version and path.is_file():
            continue
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            _bring(store, key, info.size, path)
        except OSError as error:  # a name too long here, a file where a folder goes
            notes.append(f"skipped {key[:120]}: {error.strerror or error}")
            continue
        versions[seen_as] = info.version


def _bring(store: ObjectStore, key: str, size: int, path: Path) -> None:
    """The stored event file into `path`: only what it holds past the copy here, appended
    to it, where the copy is its start (an event file only grows: TensorBoard, which
    reads on from where it stopped in the file it opened, sees the new records); else
    the whole file, anew."""
    have = path.stat().st_size if path.is_file() else 0
    if 0 < have <= size and _same_start(store, key, path, have):
        with path.open("ab") as copy:
            for start in range(have, size, APPEND_BLOCK_BYTES):
                copy.write(store.read_range(key, start, min(APPEND_BLOCK_BYTES, size - start)))
        return
    store.get_file(key, path)


def _same_start(store: ObjectStore, key: str, path: Path, have: int) -> bool:
    """The copy's last bytes are the stored file's at the same place: it grew, not
    changed."""
    tail = min(have, SAME_START_BYTES)
    with path.open("rb") as copy:
        copy.seek(have - tail)
        return copy.read(tail) == store.read_range(key, have - tail, tail)


def _summary(store: ObjectStore, folder: str) -> RunSummary | None:
    """summary.json; None before the run ends (torn or hostile: a record of nothing)."""
    try:
        return RunSummary.parse(store.read_bytes(f"{folder}{SUMMARY}"))
    except ObjectNotFound:
        return None
