"""What keeps the box up: SSH terminals, trainers that make progress; what does not."""

import pytest

from tests.infra.box_fakes import FakeBox

T0 = 1_800_000_000.0
MINUTE = 60.0
IDLE_LIMIT_MINUTES = 3
HUNG_LIMIT_MINUTES = 10


@pytest.fixture
def box(tmp_path):
    return FakeBox(
        tmp_path,
        idle_shutdown_minutes=IDLE_LIMIT_MINUTES,
        hung_trainer_minutes=HUNG_LIMIT_MINUTES,
    )


def _minutes(box, count, step=1):
    """Ticks from T0 to T0 + count minutes, `step` minutes apart (the last one included)."""
    for minute in [*range(0, count, step), count]:
        box.tick(T0 + minute * MINUTE)


def test_interactive_ssh_session_keeps_the_box_up(box):
    box.add_process("sshd: alice [priv]")
    box.add_process("sshd: alice@pts/0")
    _minutes(box, 2 * IDLE_LIMIT_MINUTES, step=2)
    assert box.calls("shutdown") == []
    assert box.watchdog_state()["busy_reasons"] == ["ssh"]


def test_session_process_of_newer_openssh_counts_too(box):
    box.add_process("sshd-session: alice@pts/3")
    box.tick(T0)
    assert box.watchdog_state()["busy_reasons"] == ["ssh"]


def test_port_forward_tunnel_does_not_keep_the_box_up(box):
    box.add_process("sshd: alice [priv]")
    box.add_process("sshd: alice@notty")
    box.add_process("/usr/sbin/sshd -D")
    _minutes(box, IDLE_LIMIT_MINUTES)
    assert box.calls("shutdown") == [["-h", "now"]]


def test_a_process_merely_named_after_a_pty_is_not_a_session(box):
    box.add_process("bash -c echo sshd: alice@pts/0")
    box.tick(T0)
    assert box.watchdog_state()["busy_reasons"] == []


def test_busy_gpu_alone_keeps_the_box_up(box):
    box.set_gpu(0, 85)
    _minutes(box, 2 * IDLE_LIMIT_MINUTES, step=2)
    assert box.calls("shutdown") == []
    assert box.watchdog_state()["busy_reasons"] == ["gpu"]


def test_gpu_below_the_threshold_is_idle(box):
    box.set_gpu(3, 9)
    _minutes(box, IDLE_LIMIT_MINUTES)
    assert len(box.calls("shutdown")) == 1


def test_trainer_with_idle_gpu_outlives_the_idle_limit(box):
    # Loading data, evaluating, uploading: the GPU rests, the run is alive.
    box.add_trainer("run-1", running=True, created_at=T0)
    box.write_status("run-1", last_checkpoint_at=T0)
    _minutes(box, HUNG_LIMIT_MINUTES - 1, step=3)
    assert box.calls("shutdown") == []
    assert box.watchdog_state()["busy_reasons"] == ["trainer"]


def test_hung_trainer_stops_the_box_after_the_long_limit(box):
    box.add_trainer("run-1", running=True, created_at=T0 - 3600)
    box.write_status("run-1", last_checkpoint_at=T0 - 1800)
    _minutes(box, HUNG_LIMIT_MINUTES - 1, step=3)
    assert box.calls("shutdown") == []
    box.tick(T0 + HUNG_LIMIT_MINUTES * MINUTE)
    assert box.calls("shutdown") == [["-h", "now"]]
    assert box.watchdog_state()["hung_run_ids"] == ["run-1"]


def test_trainer_that_keeps_checkpointing_is_not_hung(box):
    box.add_trainer("run-1", running=True, created_at=T0)
    for minute in range(0, 2 * HUNG_LIMIT_MINUTES + 1, 3):
        box.write_status("run-1", last_checkpoint_at=T0 + (minute // 6) * 6 * MINUTE)
        box.tick(T0 + minute * MINUTE)
    assert box.calls("shutdown") == []


def test_hung_trainer_without_status_file_counts_from_its_start(box):
    box.add_trainer("run-1", running=True, created_at=T0 - 3600)
    box.tick(T0)
    assert box.calls("shutdown") == []
    box.tick(T0 + HUNG_LIMIT_MINUTES * MINUTE)
    assert len(box.calls("shutdown")) == 1


def test_ssh_session_keeps_a_box_with_a_hung_trainer_up(box):
    box.add_trainer("run-1", running=True, created_at=T0 - 3600)
    box.add_process("sshd: alice@pts/0")
    _minutes(box, HUNG_LIMIT_MINUTES + 1, step=4)
    assert box.calls("shutdown") == []


def test_stopped_trainer_container_is_not_busy(box):
    box.add_trainer("run-1", running=False, created_at=T0 - 600, exit_code=0)
    _minutes(box, IDLE_LIMIT_MINUTES)
    assert len(box.calls("shutdown")) == 1


def test_failing_nvidia_smi_is_logged_and_counts_as_idle(box):
    box.set_gpu(None)
    done = box.tick(T0)
    assert 'problems=["nvidia-smi: exit 9' in done.stdout
    assert box.watchdog_state()["decision"] == "idle"


def test_docker_down_is_logged_and_counts_as_idle(box):
    box.add_trainer("run-1", running=True, created_at=T0)
    box.set_docker_up(False)
    done = box.tick(T0)
    assert "Cannot connect to the Docker daemon" in done.stdout
    assert box.watchdog_state()["decision"] == "idle"
