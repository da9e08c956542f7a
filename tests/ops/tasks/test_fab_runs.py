"""`fab runs` against moto's S3 and a local `runs/`: every run in one table, torn ones too.

The bucket holds what boxes leave there (trainer mirrors, `fab train`'s launch.json, a
sweep's folder), written with the same storage client; no box and no sshd: `fab runs`
reads storage only, so it works with the boxes stopped and after `pulumi destroy`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time

import pytest

from tests.fakes.fake_box import FakeBox
from tests.fixtures.run_folders import storage_only_target, write_journal
from tests.ops.conftest import FAB, assert_one_line_error
from tests.paths import REPO
from trainer.storage import open_store

T0 = 1_790_000_000.0
HOUR = 3600.0


def _config(lr: float, dropout: float = 0.2, seed: int = 0) -> dict:
    return {
        "data": {"data_dir": "/workspace/datasets/synth", "val_fraction": 0.15},
        "train": {"run_dir": "/workspace/runs/x", "epochs": 5, "seed": seed, "name": ""},
        "model": {"arch": "resnet18", "dropout": dropout},
        "optim": {"lr": lr, "weight_decay": 0.01},
        "checkpoint_uri": "s3://somewhere",
    }


def _put(store, run_id: str, **files) -> None:
    for name, content in files.items():
        name = name.replace("_json", ".json").replace("_jsonl", ".jsonl")
        body = content if isinstance(content, str) else json.dumps(content)
        store.write_bytes(f"runs/{run_id}/{name}", body.encode())


def _launch(started_at: float, dataset: str = "synth", **more) -> dict:
    return {"started_at": started_at, "dataset": dataset, "hourly_price_usd": 1.5, **more}


@pytest.fixture(scope="module")
def stack(moto_server, tmp_path_factory) -> dict:
    """A target whose storage holds runs in several states; `fab runs` run against it once
    as a table and once as JSON (the tests read those)."""
    tmp = tmp_path_factory.mktemp("fab-runs")
    with pytest.MonkeyPatch.context() as patch:
        for name, value in moto_server.env.items():
            patch.setenv(name, value)
        uri = moto_server.create_bucket(prefix="stack")
        _store_runs(open_store(uri))
    storage_only_target(tmp / "target.json", uri)
    found = {"target": tmp / "target.json", "local": tmp / "runs", "tmp": tmp,
             "env": moto_server.env, "moto": moto_server}  # fmt: skip
    table = _fab_runs(found)
    assert table.returncode == 0, table.stderr
    return {**found, "table": table.stdout, "listed": _json(found)}


def _store_runs(store) -> None:
    _put(store, "r-finished", launch_json=_launch(T0, name="baseline"),
         config_json=_config(2e-3),
         status_json={"state": "finished", "epoch": 5, "step": 50, "updated_at": T0 + 2 * HOUR},
         summary_json={"name": "baseline", "epochs": 5, "val": {"mae": 12.34}, "wall_s": 7000,
                       "cost_usd": 3.25, "recoveries": 1})  # fmt: skip
    _put(store, "r-running", launch_json=_launch(T0 + 3 * HOUR), config_json=_config(4e-3),
         status_json={"state": "running", "epoch": 2, "step": 20, "updated_at": T0 + 4 * HOUR},
         metrics_jsonl='{"kind": "epoch", "step": 10, "epoch": 1, "val_mae": 20.5}\n'
         '{"kind": "epoch", "step": 20, "epoch": 2, "val_mae": 15.25}\n{"kind": "tr')  # fmt: skip
    _put(store, "r-failed", launch_json=_launch(T0 + 5 * HOUR, dataset="vitaldb-m1"),
         config_json=_config(2e-3),
         status_json={"state": "failed", "exit_code": 1, "updated_at": T0 + 5 * HOUR})  # fmt: skip
    # Killed mid-upload: half a summary and no status at all.
    _put(store, "r-torn", launch_json=_launch(T0 + 6 * HOUR), summary_json='{"epochs": 3, "va')
    store.write_bytes("runs/not a run id/status.json", b'{"state": "finished"}')


def _fab_runs(stack: dict, *args: str, target: bool = True, local=None):
    env = {key: value for key, value in os.environ.items() if key != "GLUCOSE_TARGET"}
    env.update(stack["env"], COLUMNS="250")
    if target:
        env["GLUCOSE_TARGET"] = str(stack["target"])
    return subprocess.run(
        [str(FAB), "runs", "--local", str(local or stack["local"]), *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def _json(stack: dict, *args: str, **where) -> dict:
    done = _fab_runs(stack, "--json", *args, **where)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _by_id(listed: dict) -> dict:
    return {row["run_id"]: row for row in listed["runs"]}


def test_every_stored_run_is_one_line_newest_first(stack):
    lines = [line for line in stack["table"].splitlines() if line.lstrip().startswith("r-")]
    assert [line.split()[0] for line in lines] == ["r-torn", "r-failed", "r-running", "r-finished"]
    finished = next(line for line in lines if line.startswith("r-finished"))
    for shown in ("baseline", "finished", "synth", "12.34", "2 h 00 min", "3.25"):
        assert shown in finished, finished


def test_a_finished_run_shows_its_validation_mae_wall_time_dollars_and_recoveries(stack):
    row = _by_id(stack["listed"])["r-finished"]
    assert (row["name"], row["state"], row["dataset"], row["epochs"]) == (
        "baseline", "finished", "synth", 5
    )  # fmt: skip
    assert (row["best_val_mae"], row["wall_s"], row["cost_usd"], row["recoveries"]) == (
        12.34, 2 * HOUR, 3.25, 1
    )  # fmt: skip


def test_a_running_run_shows_its_best_epoch_so_far_and_no_dollars_yet(stack):
    row = _by_id(stack["listed"])["r-running"]
    assert (row["state"], row["epochs"], row["best_val_mae"]) == ("running", 2, 15.25)
    assert row["cost_usd"] is None and row["recoveries"] is None
    shown = next(line for line in stack["table"].splitlines() if line.startswith("r-running"))
    assert [cell.strip() for cell in shown.split("│")][-2:] == ["-", "-"]


def test_a_torn_run_shows_as_torn_naming_what_is_broken(stack):
    row = _by_id(stack["listed"])["r-torn"]
    assert row["state"] == "torn"
    assert any("summary.json: not JSON" in problem for problem in row["problems"])
    assert "torn: summary.json: not JSON" in stack["table"]


def test_a_failed_run_shows_its_exit_code(stack):
    assert _by_id(stack["listed"])["r-failed"]["state"] == "failed (exit 1)"


def test_a_folder_that_is_no_run_id_is_not_listed(stack):
    assert "not a run id" not in _by_id(stack["listed"])


def test_the_settings_column_shows_only_what_differs_between_runs(stack):
    assert stack["listed"]["differing"] == ["optim.lr"]
    assert "lr=0.004" in stack["table"]


def test_filters_by_state_and_by_dataset(stack):
    assert list(_by_id(_json(stack, "--state", "failed"))) == ["r-failed"]
    assert list(_by_id(_json(stack, "--dataset", "vitaldb-m1"))) == ["r-failed"]


def _downloaded(local) -> None:
    """What `fab download --run r-finished` left in `local`."""
    (local / "r-finished").mkdir(parents=True)
    (local / "r-finished" / "summary.json").write_text(json.dumps({"val": {"mae": 12.34}}))


def test_after_pulumi_destroy_the_downloaded_runs_are_listed_with_a_note(stack, tmp_path):
    _downloaded(tmp_path)
    done = _fab_runs(stack, target=False, local=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "storage not read" in done.stderr
    assert [line.split()[0] for line in done.stdout.splitlines() if "r-" in line] == ["r-finished"]


def test_a_run_both_stored_and_downloaded_is_one_row(stack, tmp_path):
    _downloaded(tmp_path)
    rows = _json(stack, local=tmp_path)["runs"]
    assert [row["where"] for row in rows if row["run_id"] == "r-finished"] == ["storage+local"]


def test_a_sweep_ranks_its_trials_by_validation_mae_and_plots_them(stack, monkeypatch):
    for name, value in stack["env"].items():
        monkeypatch.setenv(name, value)
    uri = stack["moto"].create_bucket(prefix="stack")  # a stack of its own: only the sweep
    store, sweep = open_store(uri), "sweep-a"
    storage_only_target(stack["tmp"] / "sweep-target.json", uri)
    stack = {**stack, "target": stack["tmp"] / "sweep-target.json"}
    for number, (lr, mae) in enumerate([(1e-3, 14.0), (3e-3, 11.0), (1e-2, None)]):
        run_id = f"{sweep}-t{number:03d}"
        summary = {"summary_json": {"epochs": 2, "val": {"mae": mae}, "test": None}} if mae else {}
        _put(store, run_id, launch_json=_launch(T0 + number, sweep=sweep, trial=number),
             config_json=_config(lr),
             status_json={"state": "finished" if mae else "stopped", "updated_at": T0 + HOUR},
             **summary)  # fmt: skip
    store.write_bytes(
        f"sweeps/{sweep}/trials.json",
        json.dumps({"trials": [{"run_id": f"{sweep}-t002", "state": "pruned"}]}).encode(),
    )
    store.write_bytes(
        f"sweeps/{sweep}/result.json",
        json.dumps({"chosen": f"{sweep}-t001", "val_mae": 11.0,
                    "test": {"mae": 13.5, "baseline": {"mae": 30.0}}}).encode(),
    )  # fmt: skip
    journal = [(1e-3, [20.0, 14.0], False), (3e-3, [18.0, 11.0], False), (1e-2, [25.0], True)]
    store.put_file(f"sweeps/{sweep}/optuna.journal",
                   write_journal(stack["tmp"] / "optuna.journal", sweep, journal))  # fmt: skip
    plots = stack["tmp"] / "sweep-plots"
    done = _fab_runs(stack, "--sweep", sweep, "--plot", str(plots))
    assert done.returncode == 0, done.stderr
    ranked = [
        [cell.strip() for cell in line.split("│")]
        for line in done.stdout.splitlines()
        if f"{sweep}-t" in line and "│" in line
    ]
    assert [(cells[0], cells[1]) for cells in ranked] == [
        ("1", f"{sweep}-t001"), ("2", f"{sweep}-t000"), ("3", f"{sweep}-t002")
    ]  # fmt: skip
    assert "pruned" in ranked[2]
    assert "chosen: sweep-a-t001" in done.stdout and "evaluated once" in done.stdout
    assert f"plots: {plots}/ (Optuna's history" in done.stdout
    for name in ("history", "parallel_coordinates", "intermediate_values"):
        assert (plots / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name


def _fab_in(folder, stack, *args: str):
    """`fab runs` run from `folder` with no --local: its default folders, relative to it."""
    env = {key: value for key, value in os.environ.items() if key != "GLUCOSE_TARGET"}
    env.update(stack["env"], COLUMNS="250")
    command = [str(FAB), "--search-root", str(REPO), "runs", *args]
    return subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip


def test_the_demos_runs_are_listed_without_a_flag(stack, tmp_path):
    _downloaded(tmp_path / "demo" / "runs")  # where `make demo` writes its run
    done = _fab_in(tmp_path, stack)
    assert done.returncode == 0, done.stderr
    assert [line.split()[0] for line in done.stdout.splitlines() if "r-" in line] == ["r-finished"]


def test_no_runs_anywhere_says_where_it_looked_and_how_to_point_it(stack, tmp_path):
    done = _fab_in(tmp_path, stack)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "no runs in runs/, demo/runs/; point --local DIR at a folder of runs, or --target local "
        "at this machine's; or start one: fab train"
    )


@pytest.mark.parametrize(
    ("flag", "value", "said"),
    [
        ("--state", "done", "is no run state; use one of: running, preempted, stopped, finished"),
        ("--sweep", "nosuch", "names nothing in storage or the local runs; there are: none"),
        ("--dataset", "nosuch", "there are: synth, vitaldb-m1"),
    ],
)
def test_a_filter_nothing_could_match_is_one_line_and_fails(stack, flag, value, said):
    message = assert_one_line_error(_fab_runs(stack, flag, value), f"{flag} {value!r}", said)
    assert message.startswith(flag), message


def test_a_filter_that_could_match_but_does_not_says_so_and_succeeds(stack):
    done = _fab_runs(stack, "--state", "preempted")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "none of the 4 runs matches; `fab runs` lists them all"


def _own_stack(stack: dict, monkeypatch, name: str) -> tuple[dict, object]:
    """A stack of its own (a bucket only one test writes); `fab runs` pointed at it."""
    for key, value in stack["env"].items():
        monkeypatch.setenv(key, value)
    uri = stack["moto"].create_bucket(prefix="stack")
    storage_only_target(stack["tmp"] / f"{name}.json", uri)
    return {**stack, "target": stack["tmp"] / f"{name}.json"}, open_store(uri)


def test_a_sweep_shows_what_its_trials_cost_and_which_are_not_counted_yet(stack, monkeypatch):
    stack, store = _own_stack(stack, monkeypatch, "sweep-cost")
    for number, spent in enumerate([0.35, 1.0, None]):
        run_id = f"sweep-c-t{number:03d}"
        summary = {"summary_json": {"val": {"mae": 12.0 + number}, "cost_usd": spent}}
        _put(store, run_id, launch_json=_launch(T0, sweep="sweep-c", trial=number),
             status_json={"state": "finished" if spent else "running", "updated_at": T0},
             **(summary if spent else {}))  # fmt: skip
    done = _fab_runs(stack, "--sweep", "sweep-c", "--plot", str(stack["tmp"] / "c-plots"))
    assert done.returncode == 0, done.stderr
    assert "cost:   $1.35 for 2 trial(s); 1 trial(s) not ended yet, not counted" in done.stdout
    listed = _json(stack, "--sweep", "sweep-c", "--plot", str(stack["tmp"] / "c-plots"))
    assert listed["cost_usd"] == 1.35


def test_a_sweep_result_without_a_validation_mae_shows_a_dash(stack, monkeypatch):
    stack, store = _own_stack(stack, monkeypatch, "sweep-odd")
    _put(store, "sweep-d-t000", launch_json=_launch(T0, sweep="sweep-d", trial=0),
         status_json={"state": "finished", "updated_at": T0})  # fmt: skip
    store.write_bytes("sweeps/sweep-d/result.json", b'{"chosen": "sweep-d-t000", "test": 3}')
    done = _fab_runs(stack, "--sweep", "sweep-d", "--plot", str(stack["tmp"] / "d-plots"))
    assert done.returncode == 0, done.stderr
    assert "chosen: sweep-d-t000 (lowest validation MAE, -); its test MAE - mg/dL" in done.stdout


def _six_good_runs(store) -> None:
    for number in range(6):
        name = f"baseline with a longer learning rate warm-up, try {number}"
        _put(store, f"good-{number}", launch_json=_launch(T0 + number, name=name),
             config_json=_config(1e-3 * (number + 1), dropout=0.1 * number, seed=number),
             status_json={"state": "finished", "updated_at": T0 + HOUR},
             summary_json={"name": name, "epochs": 5, "val": {"mae": 12.0},
                           "cost_usd": 1.25})  # fmt: skip


def test_a_file_nested_too_deep_is_a_problem_on_its_own_row_only(stack, monkeypatch):
    stack, store = _own_stack(stack, monkeypatch, "nested")
    _six_good_runs(store)
    _put(store, "nested", launch_json=_launch(T0 + 9), status_json="[" * 1000 + "]" * 1000)
    rows = _by_id(_json(stack))
    assert sorted(rows) == ["good-0", "good-1", "good-2", "good-3", "good-4", "good-5", "nested"]
    assert rows["nested"]["state"] == "torn"
    assert rows["nested"]["problems"] == ["status.json: nested too deep to read"]


def test_a_half_written_summary_is_torn_even_when_its_status_says_finished(stack, monkeypatch):
    stack, store = _own_stack(stack, monkeypatch, "half")
    _put(store, "half", launch_json=_launch(T0),
         status_json={"state": "finished", "updated_at": T0 + HOUR},
         summary_json='{"epochs": 5, "val": {"m')  # fmt: skip
    row = _by_id(_json(stack))["half"]
    assert row["state"] == "torn" and row["problems"] == ["summary.json: not JSON (torn?)"]


def _in_terminal(env: dict, columns: int, *args: str) -> tuple[list[str], str]:
    """`fab runs ARGS` on a terminal of `columns` (rich fits the table to it): the lines
    it showed, its colours left out, and its stderr."""
    import pty

    env = {**env, "COLUMNS": str(columns), "LINES": "40"}
    parent, child = pty.openpty()
    with os.fdopen(parent, "rb") as terminal:
        done = subprocess.run(
            [str(FAB), "runs", *args], cwd=REPO, env=env,
            stdin=child, stdout=child, stderr=subprocess.PIPE, timeout=120, check=False,
        )  # fmt: skip
        os.close(child)
        shown = b""
        while chunk := _read_some(terminal):
            shown += chunk
    assert done.returncode == 0, done.stderr
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", shown.decode()).splitlines(), done.stderr.decode()


def test_on_a_120_column_terminal_each_run_is_one_line(stack, monkeypatch):
    stack, store = _own_stack(stack, monkeypatch, "narrow")
    _six_good_runs(store)
    env = {key: value for key, value in os.environ.items() if key != "GLUCOSE_TARGET"}
    env.update(stack["env"], GLUCOSE_TARGET=str(stack["target"]))
    lines, _ = _in_terminal(env, 120, "--local", str(stack["local"]))
    assert max(len(line) for line in lines) <= 120, lines
    assert sum("good-" in line for line in lines) == 6
    assert len([line for line in lines if line.strip()]) == 6 + 2  # the header and its rule


def _read_some(terminal) -> bytes:
    try:
        return os.read(terminal.fileno(), 65536)
    except OSError:  # EIO: the child's side is closed and everything was read
        return b""


def test_a_run_with_its_launch_record_alone_is_listed_as_launched(stack, tmp_path):
    # `fab train` stored the record, then the run died before the trainer's first upload.
    from ops.run.launch import store_launch_record

    store_launch_record(f"file://{tmp_path / 'storage'}", "r-died-early", _launch(T0))
    local = tmp_path / "storage" / "runs"
    listed = _json(stack, "--state", "launched", target=False, local=local)
    assert [(row["run_id"], row["state"]) for row in listed["runs"]] == [
        ("r-died-early", "launched")
    ]


@pytest.mark.e2e  # moto
def test_a_run_killed_before_its_first_upload_is_listed_failed_with_its_exit_code(
    moto_server, fake_metadata, tmp_path, monkeypatch
):
    # `fab train` stored the launch record, the kernel killed the trainer before its
    # first upload, then the box's resume unit looked (with the box's role, on its clock).
    from ops.run.launch import store_launch_record

    for name, value in moto_server.env.items():
        monkeypatch.setenv(name, value)
    uri = moto_server.create_bucket(prefix="stack")
    store_launch_record(uri, "r-killed", _launch(T0))
    box = FakeBox(
        tmp_path / "box",
        metadata_url=fake_metadata.url,
        docker_wait_seconds=1,
        storage_uri=uri,
        storage_region="us-east-1",
        storage_endpoint=moto_server.endpoint_url,
    )
    ended = time.time() - 30
    box.add_trainer(
        "r-killed", running=False, created_at=ended - 60, exit_code=137, finished_at=ended
    )
    looked = box.run("resume.py")
    assert looked.returncode == 0, looked.stdout + looked.stderr
    where = {"target": storage_only_target(tmp_path / "target.json", uri),
             "local": tmp_path / "runs", "env": moto_server.env}  # fmt: skip
    listed = _json(where, "--state", "failed")
    assert [(row["run_id"], row["state"]) for row in listed["runs"]] == [
        ("r-killed", "failed (exit 137)")
    ]


def test_a_sweep_whose_trials_have_uploaded_nothing_yet_says_so_quietly(stack, monkeypatch):
    for name, value in stack["env"].items():
        monkeypatch.setenv(name, value)
    uri = stack["moto"].create_bucket(prefix="stack")
    store, sweep = open_store(uri), "sweep-b"
    storage_only_target(stack["tmp"] / "sweep-b-target.json", uri)
    stack = {**stack, "target": stack["tmp"] / "sweep-b-target.json"}
    _put(store, "r-other", launch_json=_launch(T0), config_json=_config(2e-3),
         status_json={"state": "finished", "updated_at": T0 + HOUR})  # fmt: skip
    rows = [{"run_id": f"{sweep}-t000", "state": "running"},
            {"run_id": f"{sweep}-t001", "state": "running"}]  # fmt: skip
    store.write_bytes(f"sweeps/{sweep}/trials.json", json.dumps({"trials": rows}).encode())
    journal = write_journal(stack["tmp"] / "sweep-b.journal", sweep, [])
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    study = optuna.load_study(
        study_name=sweep, storage=JournalStorage(JournalFileBackend(str(journal)))
    )
    space = {"lr": optuna.distributions.FloatDistribution(1e-4, 1e-1, log=True)}
    study.ask(space), study.ask(space)  # two trials running, nothing reported yet
    store.put_file(f"sweeps/{sweep}/optuna.journal", journal)
    done = _fab_runs(stack, "--sweep", sweep, "--plot", str(stack["tmp"] / "sweep-b-plots"))
    assert done.returncode == 0, done.stderr
    assert "none of the" not in done.stdout
    assert f"sweep {sweep}: 2 trials running, none has uploaded a record yet" in done.stdout
    assert "Warning" not in done.stderr and "[W " not in done.stderr, done.stderr


def test_a_setting_left_to_the_trainer_shows_as_a_dash_and_wall_time_as_status_says_it(
    stack, tmp_path
):
    local = open_store(f"file://{tmp_path / 'runs'}")
    capped, uncapped = _config(2e-3), _config(2e-3)
    capped["train"]["max_steps"], uncapped["train"]["max_steps"] = 500, None
    for run_id, config in (("r-capped", capped), ("r-uncapped", uncapped)):
        for name, body in (
            ("config.json", config),
            ("launch.json", _launch(T0)),
            ("status.json", {"state": "finished", "updated_at": T0 + 756}),
        ):
            local.write_bytes(f"{run_id}/{name}", json.dumps(body).encode())  # fmt: skip
    done = _fab_runs(stack, target=False, local=tmp_path / "runs")
    assert done.returncode == 0, done.stderr
    assert "max_steps=-" in done.stdout and "None" not in done.stdout
    assert "13 min" in done.stdout and "0.21 h" not in done.stdout


SWEEP_ID = "sweep-20261126-121010"
HEADER_WORDS = {"#", "run", "name", "state", "dataset", "settings", "epochs", "best", "val",
                "MAE", "wall", "$", "recoveries", "lr", "dropout"}  # fmt: skip


def _a_morning_of_runs(local) -> list[str]:
    """What a first morning leaves: a named run, one killed, a torn one, a sweep's three
    trials (named by the sweep, as its driver names them); their ids, newest first."""
    store = open_store(f"file://{local.parent}")  # `_put` writes under runs/
    _put(store, "20261126-101010", launch_json=_launch(T0, name="first try"),
         config_json=_config(1e-3), status_json={"state": "finished", "updated_at": T0 + HOUR},
         summary_json={"name": "first try", "epochs": 5, "val": {"mae": 12.3}, "wall_s": 3600,
                       "cost_usd": 1.5, "recoveries": 0})  # fmt: skip
    _put(store, "20261126-111010", launch_json=_launch(T0 + 10), config_json=_config(3e-3, 0.1),
         status_json={"state": "failed", "exit_code": 137, "updated_at": T0 + HOUR})  # fmt: skip
    _put(store, "20261126-112010", launch_json=_launch(T0 + 15), summary_json='{"epochs": 3, "va')
    trials = [f"{SWEEP_ID}-t{n:03d}" for n in range(3)]
    for n, run_id in enumerate(trials):
        name = f"{SWEEP_ID} t{n:03d}"
        _put(store, run_id, launch_json=_launch(T0 + 20 + n, sweep=SWEEP_ID, trial=n, name=name),
             config_json=_config(1e-3 * (n + 1)),
             status_json={"state": "finished", "updated_at": T0 + HOUR},
             summary_json={"name": name, "epochs": 5, "val": {"mae": 12.0 + n}, "wall_s": 600,
                           "cost_usd": 0.25, "recoveries": 0})  # fmt: skip
    return [*trials[::-1], "20261126-112010", "20261126-111010", "20261126-101010"]


@pytest.mark.parametrize("columns", [80, 100, 200])
def test_the_table_fits_the_terminal_with_no_word_cut_short(tmp_path, columns):
    run_ids = _a_morning_of_runs(tmp_path / "runs")
    env = {key: value for key, value in os.environ.items() if key != "GLUCOSE_TARGET"}
    lines, said = _in_terminal(env, columns, "--target", "local", "--local", str(tmp_path / "runs"))
    table = [line for line in lines if line.strip()]
    assert max(len(line) for line in table) <= columns, table
    assert not any("…" in line for line in table), table
    assert set(table[0].replace("┃", " ").split()) <= HEADER_WORDS, table[0]
    rows = table[2:]
    assert [row.split()[0] for row in rows] == run_ids, table  # every id whole, once
    assert all(row.count(SWEEP_ID) == 1 for row in rows[:3]), rows  # no name repeating it
    at = [header.strip() for header in table[0].split("┃")].index("state")
    states = [row.split("│")[at].strip() for row in rows]
    assert states[:3] == ["finished"] * 3 and "failed (exit 137)" in states, states
    assert all(value in " ".join(rows) for value in ("14.00", "13.00", "12.00", "12.30"))
    if columns == 200:
        for header in ("name", "dataset", "settings", "epochs", "best val MAE", "recoveries"):
            assert header in table[0], table[0]
        assert "first try" in rows[-1] and "torn: summary.json: not JSON" in rows[3]
    else:
        assert f"{columns} columns: " in said and "left out" in said, said


def test_a_sweeps_trials_are_listed_by_their_ids_and_swept_values_alone(tmp_path):
    _a_morning_of_runs(tmp_path / "runs")
    env = {key: value for key, value in os.environ.items() if key != "GLUCOSE_TARGET"}
    lines, _ = _in_terminal(env, 100, "--target", "local", "--local", str(tmp_path / "runs"),
                            "--sweep", SWEEP_ID, "--plot", str(tmp_path / "plots"))  # fmt: skip
    header = next(line for line in lines if "┃" in line)
    at = [name.strip() for name in header.split("┃")].index("lr")  # a column per swept flag
    rows = [
        [cell.strip() for cell in line.split("│")]
        for line in lines
        if SWEEP_ID in line and "│" in line
    ]
    assert [row[1] for row in rows] == [f"{SWEEP_ID}-t{n:03d}" for n in range(3)], rows
    assert all(sum(SWEEP_ID in cell for cell in row) == 1 for row in rows), rows
    assert [row[at] for row in rows] == ["0.001", "0.002", "0.003"], rows


def _upload_pending(root, run_id: str, missing: list[str] | None) -> None:
    """A run in `root`/runs/ as the box leaves one in storage that finished with its last
    uploads not all landed: `finished-upload-pending`, with the files storage lacks once
    the box named them (box/unfinished_uploads.py)."""
    from box.contract import UPLOADS_MISSING

    uploads = {"pending": 1, **({UPLOADS_MISSING: missing} if missing is not None else {})}
    status = {"state": "finished-upload-pending", "epoch": 5, "uploads": uploads}
    _put(open_store(f"file://{root}"), run_id, status_json=status,
         summary_json={"epochs": 5, "val": {"mae": 11.5}})  # fmt: skip


MISSING = ["checkpoints/step-000000050-epoch-0005.pt", "report.md"]


def test_a_finished_run_whose_last_uploads_did_not_land_names_the_files_storage_lacks(
    stack, tmp_path
):
    _upload_pending(tmp_path, "r-pending", MISSING)
    done = _fab_runs(stack, target=False, local=tmp_path / "runs")
    assert done.returncode == 0, done.stderr
    row = next(line for line in done.stdout.splitlines() if line.startswith("r-pending"))
    assert "finished-upload-pending: 2 files not in storage" in row
    note = " ".join(done.stderr.split())  # rich wraps the note at the terminal's width
    assert (
        f"run r-pending finished, but 2 of its files have not reached storage "
        f"({', '.join(MISSING)}); they wait on the box" in note
    )
    assert "`docker start glucose-train-r-pending` on the box starts it now" in note


def test_a_finished_run_whose_files_the_box_has_not_named_yet_says_so(stack, tmp_path):
    _upload_pending(tmp_path, "r-pending", None)
    done = _fab_runs(stack, target=False, local=tmp_path / "runs")
    assert done.returncode == 0, done.stderr
    assert "finished-upload-pending: some files not in storage" in done.stdout
    note = " ".join(done.stderr.split())
    assert "run r-pending finished, but its last uploads have not all reached storage" in note


def test_state_finished_lists_upload_pending_runs_too_and_its_own_word_those_alone(stack, tmp_path):
    local = tmp_path / "runs"
    _upload_pending(tmp_path, "r-pending", MISSING)
    _put(open_store(f"file://{tmp_path}"), "r-done", status_json={"state": "finished"})
    finished = _json(stack, "--state", "finished", target=False, local=local)
    assert sorted(_by_id(finished)) == ["r-done", "r-pending"]
    pending = _json(stack, "--state", "finished-upload-pending", target=False, local=local)
    assert [(row["run_id"], row["missing"]) for row in pending["runs"]] == [("r-pending", MISSING)]


def test_the_state_flags_help_names_every_state_a_run_is_listed_in(stack):
    done = subprocess.run([str(FAB), "runs", "--help"], cwd=REPO, capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip
    helped = " ".join(done.stdout.split())
    for state in ("running", "finished", "finished-upload-pending", "failed", "torn", "launched"):
        assert state in helped, helped
