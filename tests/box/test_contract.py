"""One box contract: every copy of it that cannot import box/contract.py says the same,
and its typed records read what a hostile file holds without trusting it.

The trainer imports the contract (the image ships it). The first-boot files travel
without the programs, and setup-box.sh and the units are not Python: each keeps its own
spelling of a few names, and each spelling is checked here against box.contract.
"""

import re

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
