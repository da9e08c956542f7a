"""`fab tensorboard` with no `--run`: every run of the stack in one TensorBoard, here.

The runs come from storage and the local `runs/` (ops.runs.run_cache), so no box need
be up; TensorBoard runs on this machine, from this venv, on the loopback only, and the
cache is gathered again every minute while it serves: a run started since, new steps
of one going on and a run's end show without a restart (`ops.runs.run_cache` writes the
cache as TensorBoard reads on: grown files, new HParams folders). Its
Scalars page shows all runs' curves together, its HParams page one row per run and
sweep trial with the run's settings and final metrics.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
import warnings
from pathlib import Path

from invoke.exceptions import Exit
from rich.console import Console

from ops import CHECKOUT
from ops.runs import run_cache
from ops.runs.listing import POINT_IT, looked_in
from ops.terminal_text import say_note

CACHE_ROOT = CHECKOUT / ".cache" / "tensorboard"
GATHER_EVERY_SECONDS = 60
GATHER_SECONDS_ENV = "GLUCOSE_TENSORBOARD_GATHER_SECONDS"
"""Sooner, for the tests that watch a run come in."""
RELOAD_SECONDS = 10
"""TensorBoard's own look at the cache (a local folder: cheap)."""
console = Console(stderr=True, soft_wrap=True)


def cache_for(storage_uri: str | None, local: list[Path]) -> Path:
    """One cache per place runs are read from: two stacks never mix their runs."""
    where = "|".join([storage_uri or "", *(str(d.resolve()) for d in local)])
    return CACHE_ROOT / hashlib.sha256(where.encode()).hexdigest()[:16]


def serve(storage_uri: str | None, local: list[Path], port: int, cache: Path | None) -> None:
    """Gather the runs, then serve them until Ctrl-C."""
    cache = cache or cache_for(storage_uri, local)
    gathered = run_cache.gather(storage_uri, local, cache)
    for note in gathered.notes:
        say_note(console, note)
    if not gathered.run_ids:
        raise Exit(f"no runs in {looked_in(storage_uri, local)}; {POINT_IT}")
    url = _launch(cache, port)
    print(f"TensorBoard of {len(gathered.run_ids)} runs: {url}", flush=True)
    console.print(f"runs gathered in {cache}; HParams: {url}#hparams")
    console.print(
        f"new runs, new steps and runs' ends come in every {gather_seconds():.0f} s while it "
        "serves; "
        "Ctrl-C stops it"
    )
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C: the way to stop it
        keep_in_step(storage_uri, local, cache, set(gathered.notes))


def gather_seconds() -> float:
    """How often the cache is brought in step with storage while TensorBoard serves."""
    return float(os.environ.get(GATHER_SECONDS_ENV) or GATHER_EVERY_SECONDS)


def keep_in_step(storage_uri: str | None, local: list[Path], cache: Path, said: set[str]) -> None:
    """Gather again and again (TensorBoard serves from its own threads and reloads the
    cache every RELOAD_SECONDS): a run that started, or went on, since shows. A note is
    said once."""
    while True:
        time.sleep(gather_seconds())
        gathered = run_cache.gather(storage_uri, local, cache)
        for note in gathered.notes:
            if note not in said:
                say_note(console, note)
                said.add(note)


def _launch(logdir: Path, port: int) -> str:
    """TensorBoard in this process (its server runs in threads of its own); its URL."""
    try:
        with warnings.catch_warnings():  # setuptools' word on pkg_resources, which 2.20 imports
            warnings.simplefilter("ignore", UserWarning)
            from tensorboard import default, program
    except ModuleNotFoundError as error:  # a venv made before the project pinned setuptools
        raise Exit(
            f"TensorBoard cannot start: no module {error.name!r} (setuptools 82 removed "
            "pkg_resources, which TensorBoard 2.20 imports); run `make venv`, or "
            "`.venv/bin/pip install 'setuptools<82'`"
        ) from None

    board = program.TensorBoard(plugins=default.get_static_plugins())
    board.configure(logdir=str(logdir), host="127.0.0.1", port=port, reload_interval=RELOAD_SECONDS)
    try:
        return board.launch()
    except program.TensorBoardServerException as error:
        raise Exit(f"TensorBoard did not start on port {port}: {error.msg}") from None
