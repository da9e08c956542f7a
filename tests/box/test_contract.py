"""One box contract: every copy of it that cannot import box/contract.py says the same.

The trainer image carries trainer/ alone, the first-boot files travel without the
programs, and setup-box.sh and the units are not Python: each keeps its own spelling
of a few names, and each spelling is checked here against box.contract.
"""

import re

from box import bootstrap, contract, install
from box.watchdog_config import WatchdogConfig
from stack import box_packing, cloud_init, storage_layout
from tests.paths import BOX_DIR
from trainer import box_files, exit_codes
from trainer.checkpoints import resume, sync
from trainer.data.vitaldb import prepare
from trainer.loop import rank_outputs
from trainer.reports import status
from trainer.sweep import mirror
from trainer.sweep import spec as sweep_spec


def test_the_trainers_exit_codes_are_the_boxes():
    assert exit_codes.EXIT_OK == contract.EXIT_FINISHED
    assert exit_codes.EXIT_USER_ERROR == contract.EXIT_USER_ERROR
    assert exit_codes.EXIT_UNWRITABLE == contract.EXIT_UNWRITABLE
    assert exit_codes.EXIT_STOPPED == contract.EXIT_STOPPED
    assert exit_codes.EXIT_UNAVAILABLE == contract.EXIT_BOXES_AWAY


def test_the_trainer_writes_the_files_the_box_reads():
    assert status.STATUS_FILE == contract.STATUS_FILE
    assert rank_outputs.HEARTBEAT_FILE == contract.HEARTBEAT_FILE
    assert (prepare.WORK_DIR, prepare.HEARTBEAT) == contract.PREPARE_HEARTBEAT
    assert status.UPLOAD_PENDING == contract.UPLOAD_PENDING_STATE
    # What the box programs read of them, and write of a run that failed before its
    # trainer stored how it ended (box/stored_end.py).
    assert {"run_id", "step", "updated_at", "state", "exit_code"} <= set(status.STATUS_KEYS)
    assert contract.FAILED_STATE in status.STATES
    assert set(contract.END_STATES) == set(status.STATES) - set(status.RECOVERED_FROM)


def test_the_box_stores_a_runs_end_in_the_folder_fab_train_gives_its_trainer():
    assert storage_layout.RUNS_PREFIX == contract.RUNS_PREFIX
    assert storage_layout.run_uri("s3://b/p", "r1") == f"s3://b/p/{contract.RUNS_PREFIX}/r1"


def test_the_trainer_leaves_the_boxes_own_files_alone():
    assert box_files.STOP_MARKER == contract.STOPPED_BY_USER
    assert box_files.LAUNCH_RECORD == contract.LAUNCH_FILE
    assert sync.BOX_MARKERS == (contract.STOPPED_BY_USER,)
    assert set(resume.NOT_RESTORED) == {contract.STOPPED_BY_USER, contract.LAUNCH_FILE}


def test_the_trainer_reads_the_boxes_records_by_their_names():
    assert box_files.BOOTS_FILE == contract.BOOTS_FILE
    assert box_files.STOPS_FILE == contract.STOPS_FILE
    assert box_files.RECORD_AT == contract.RECORD_AT
    assert box_files.RECORD_BOOT_ID == contract.RECORD_BOOT_ID
    assert box_files.RECORD_SIZE == contract.RECORD_SIZE
    assert box_files.RECORD_MARKET == contract.RECORD_MARKET


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


def test_a_sweeps_driver_keeps_the_boxes_and_the_stacks_names():
    assert sweep_spec.STATUS_FILE == contract.STATUS_FILE
    assert mirror.sweep_uri("s3://b/p/", "sw1") == storage_layout.sweep_uri("s3://b/p/", "sw1")
    # A trial's run id, `<sweep id>-tNNN`, is a name the box takes.
    assert contract.NAME_PATTERN.fullmatch("s" * sweep_spec.MAX_SWEEP_ID_CHARS + "-t999")
