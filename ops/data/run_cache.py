"""Every run of a stack, gathered into one local folder that one TensorBoard reads.

`fab tensorboard` (no `--run`) reads storage, not a box: the runs' `tb/` event files and
the JSON that says what they were (`config.json`, `summary.json`, `launch.json`) come
from `<storageUri>/runs/` and from the local `runs/` (`fab download`) and `demo/runs/`, whether the
boxes are up or not. Each run becomes `<cache>/<run_id>/`: its event files, and one
file of HParams summaries (ops.run.hparams) written here from its JSON, so runs that
ended before this existed are compared too. An event file comes again only when the
store's listing says it changed (`versions.json` keeps what each copy came from).
A run in both places is taken from storage (the newer).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ops.run.hparams import write_hparams
from ops.run.listing import sources
from ops.run.records import SUMMARY, read_run, run_ids
from trainer.storage import ObjectNotFound, ObjectStore, open_store
from trainer.storage.local_paths import UnsafeKey, local_path

TB_FOLDER = "tb/"
VERSIONS_FILE = "versions.json"
"""In the cache (not a run's folder): the store version each event file came from."""


@dataclass
class Gathered:
    run_ids: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """What could not be read (a source down, a refused key), one line each."""


def gather(storage_uri: str | None, local: list[Path], cache: Path) -> Gathered:
    """Bring every run's event files and HParams into `cache`; the run ids, sorted."""
    gathered, seen = Gathered(), set()
    versions = _read_versions(cache)
    for uri, prefix, where in sources(storage_uri, local):
        try:
            store = open_store(uri)
            found = [run_id for run_id in run_ids(store, prefix) if run_id not in seen]
        except Exception as error:  # one source down must not hide the other
            gathered.notes.append(f"{where} not read ({uri}): {type(error).__name__}: {error}")
            continue
        for run_id in found:
            try:
                _gather_run(store, f"{prefix}{run_id}/", cache / run_id, versions, gathered.notes)
                write_hparams(cache / run_id, read_run(store, run_id, prefix, where),
                              _summary(store, f"{prefix}{run_id}/"))  # fmt: skip
            except Exception as error:  # the box writes the bucket: one run never hides the rest
                gathered.notes.append(
                    f"run {run_id} left out: {type(error).__name__}: {error}"[:300]
                )
        seen.update(found)
    (cache / VERSIONS_FILE).write_text(json.dumps(versions, indent=1, sort_keys=True))
    gathered.run_ids = sorted(seen)
    return gathered


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
            store.get_file(key, path)
        except OSError as error:  # a name too long here, a file where a folder goes
            notes.append(f"skipped {key[:120]}: {error.strerror or error}")
            continue
        versions[seen_as] = info.version


def _summary(store: ObjectStore, folder: str) -> dict | None:
    """summary.json's final metrics; None before the run ends (or when torn)."""
    try:
        value = json.loads(store.read_bytes(f"{folder}{SUMMARY}"))
    except (ObjectNotFound, ValueError, RecursionError):  # none yet, torn, or hostile
        return None
    return value if isinstance(value, dict) else None
