"""One box contract: every copy of it that cannot import box/contract.py says the same,
and its typed records read what a hostile file holds without trusting it.

The trainer imports the contract (the image ships it). The first-boot files travel
without the programs, and setup-box.sh and the units are not Python: each keeps its own
spelling of a few names, and each spelling is checked here against box.contract.
"""

import dataclasses
import re

import pytest

from box import bootstrap, contract, install
from box.watchdog_config import WatchdogConfig
from stack import box_packing, cloud_init, storage_layout
from tests.paths import BOX_DIR
from trainer.sweep import spec as sweep_spec


def test_a_runs_end_states_are_every_state_but_those_it_starts_again_from():
    # The box stores a failed run's end only over none of these (box/stored_end.py).
    assert set(contract.END_STATES) == set(contract.STATES) - set(contract.RECOVERED_FROM)


def test_the_bootstrap_looks_where_cloud_init_and_install_put_things():
    assert str(bootstrap.SOURCE_PATH) == cloud_init.SOURCE_PATH
    assert str(bootstrap.SETTINGS_PATH) == contract.WATCHDOG_CONFIG_PATH
    assert str(bootstrap.PROGRAM_DIR) == contract.PROGRAM_DIR
    assert bootstrap.CURRENT == contract.CURRENT
    assert bootstrap.PACKAGE == install.PACKAGE == box_packing.PACKAGE
    assert bootstrap.FAILED_MARKER == contract.FAILED_MARKER
    assert bootstrap.DEFAULTS["box_root"] == contract.BOX_ROOT
    assert f"{contract.PROGRAM_DIR}/bootstrap.py" == cloud_init.BOOTSTRAP_PATH


def test_the_bootstrap_talks_to_the_clouds_as_the_watchdog_does():
    defaults, watchdog = bootstrap.DEFAULTS, WatchdogConfig("azure", 30)
    assert defaults["imds_url"] == watchdog.imds_url
    assert defaults["arm_url"] == watchdog.arm_url
    assert defaults["arm_api_version"] == watchdog.arm_api_version
    assert tuple(defaults["shutdown_command"]) == watchdog.shutdown_command


def test_the_bootstrap_unit_runs_until_the_programs_are_current():
    unit = (BOX_DIR / "glucose-bootstrap.service").read_text()
    assert f"ConditionPathExists=!{contract.PROGRAM_DIR}/{contract.CURRENT}\n" in unit
    assert f"ExecStart=/usr/bin/python3 {cloud_init.BOOTSTRAP_PATH}\n" in unit


def test_the_units_run_the_current_programs_with_the_boxes_settings():
    for unit in BOX_DIR.glob("glucose-*.service"):
        text = unit.read_text()
        if unit.name != "glucose-bootstrap.service":
            assert f"WorkingDirectory={contract.PROGRAM_DIR}/{contract.CURRENT}\n" in text, unit
            programs = re.findall(r"=/usr/bin/python3 -m box\.(\w+)\n", text)
            assert programs and len(programs) == text.count("/usr/bin/python3"), unit
            for program in programs:
                assert (BOX_DIR / f"{program}.py").is_file(), unit
        if "watchdog_config" in text or "GLUCOSE_WATCHDOG_CONFIG" in text:
            assert f"GLUCOSE_WATCHDOG_CONFIG={contract.WATCHDOG_CONFIG_PATH}" in text, unit


def test_setup_box_makes_the_boxes_directories_and_markers():
    script = (BOX_DIR / "setup-box.sh").read_text()
    for directory in (*contract.USER_DIRS, contract.WATCHDOG_DIR):
        assert f'"$box_root/{directory}"' in script, directory
    assert f'"$box_root/{contract.READY_MARKER}"' in script
    assert f'"$box_root/{contract.FAILED_MARKER}"' in script
    owned = " ".join(f'"$box_root/{directory}"' for directory in contract.USER_DIRS)
    assert f'chown "$ssh_user:$ssh_user" {owned}' in script


def test_the_packer_never_ships_the_contract_without_the_programs_that_read_it():
    shipped = {path.name for path in box_packing.shipped_sources()}
    assert {"contract.py", "watchdog_config.py", "install.py"} <= shipped


def test_every_box_file_names_the_python_the_contract_does():
    minimum = ".".join(map(str, contract.MIN_PYTHON))
    for path in BOX_DIR.glob("*.py"):
        for claimed in re.findall(r"Python (3\.\d+)\+", path.read_text()):
            assert claimed == minimum, path.name


def test_a_sweeps_longest_trial_run_id_is_a_name_the_box_takes():
    # A trial's run id is `<sweep id>-tNNN`.
    assert contract.NAME_PATTERN.fullmatch("s" * sweep_spec.MAX_SWEEP_ID_CHARS + "-t999")


def test_a_run_and_a_sweep_live_under_their_box_folders_names_in_storage():
    assert contract.run_uri("s3://b/p/", "r1") == "s3://b/p/runs/r1"
    assert contract.sweep_uri("az://a/c", "sw1") == "az://a/c/sweeps/sw1"
    assert storage_layout.RUNS_PREFIX == contract.RUNS_DIR


def test_a_record_keeps_only_the_keys_it_knows_with_their_types():
    written = {"state": "running", "step": True, "updated_at": 12, "exit_code": "0", "x": 1}
    assert contract.RunRecord.from_dict(written).known() == {"state": "running", "updated_at": 12}
    launch = contract.LaunchRecord.from_dict({"boxes": 2.0, "spot": 1, "started_at": 5.5})
    assert launch.to_json() == {"started_at": 5.5}
    summary = contract.RunSummary.from_dict({"val": {"mae": 16.2}, "cost_usd": "3"})
    assert (summary.val_mae, summary.cost_usd) == (16.2, None)


def test_a_status_that_names_no_known_state_has_none():
    assert contract.RunRecord.from_dict({"state": "exploded"}).state is None
    assert contract.RunRecord.parse(b'{"state": "fin') == contract.RunRecord()


def test_a_launch_records_deadline_and_prices_are_its_named_keys():
    record = contract.LaunchRecord(deadline=9.0, hourly_prices_usd={"g6 spot": 1.0}).to_json()
    assert set(record) == {contract.LAUNCH_DEADLINE, contract.LAUNCH_PRICES}


def test_a_summary_writes_every_key_even_those_it_has_no_value_for():
    assert contract.RunSummary(run_id="r1").to_json()["test"] is None


def test_a_number_no_float_holds_is_no_number_and_is_said():
    written = {"updated_at": float("nan"), "eta_s": float("inf"), "val_mae": 10**400,
               "step": 2**70, "epoch": 3, "train_loss": -float("inf")}  # fmt: skip
    record = contract.RunRecord.from_dict(written)
    assert record.known() == {"epoch": 3}
    assert contract.RunRecord.problems(written) == [
        "step is an integer of about 22 digits, not a whole number",
        "train_loss is -Infinity, not a finite number",
        "val_mae is an integer of about 401 digits, not a finite number",
        "eta_s is Infinity, not a finite number",
        "updated_at is NaN, not a finite number",
    ]


def test_a_file_that_cannot_be_read_is_said_once_as_a_whole():
    torn = (contract.RunRecord(), ["not JSON (torn?)"])
    assert contract.RunRecord.checked(b'{"state": "fin') == torn
    assert contract.RunRecord.checked(b"[" * 100_000)[1] == ["nested too deep to read"]
    assert contract.LaunchRecord.checked(b"[1]")[1] == ["holds a list, not an object"]
    assert contract.RunRecord.checked(None) == (contract.RunRecord(), [])
    assert contract.RunRecord.checked(b'{"state": "exploded"}')[1] == [
        "state 'exploded' is no run state"
    ]


def test_a_field_of_a_list_of_objects_is_read_by_its_annotation():
    @dataclasses.dataclass(frozen=True)
    class Trials(contract._Record):
        trials: list[dict] | None = None

    assert Trials.from_dict({"trials": [{"n": 1}]}).trials == [{"n": 1}]
    assert Trials.from_dict({"trials": [{"n": 1}, 2]}).trials is None
    assert Trials.problems({"trials": [3]}) == ["trials is a list, not a list of objects"]


def test_a_field_no_reader_reads_fails_when_its_record_is_defined():
    with pytest.raises(TypeError, match=r"Odd\.when: no reader for"):

        @dataclasses.dataclass(frozen=True)
        class Odd(contract._Record):
            when: tuple | None = None

    with pytest.raises(TypeError, match=r"Bare.count: <class 'int'> is not `X \| None`"):

        @dataclasses.dataclass(frozen=True)
        class Bare(contract._Record):
            count: int = 0
