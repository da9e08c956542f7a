"""What keeps the box up: SSH terminals, GPU work, leases; what does not."""

import pytest

from tests.fakes.fake_box import FakeBox

T0 = 1_800_000_000.0
MINUTE = 60.0
IDLE_LIMIT_MINUTES = 3
# Goal of issue 13: the bill stops within the idle limit + 2 minutes of idleness.
STOP_BOUND_MINUTES = IDLE_LIMIT_MINUTES + 2


@pytest.fixture
def box(tmp_path):
    return FakeBox(tmp_path, idle_shutdown_minutes=IDLE_LIMIT_MINUTES)


def _minutes(box, count, step=1):
    """Ticks from T0 to T0 + count minutes, `step` minutes apart (the last one included)."""
    for minute in [*range(0, count, step), count]:
        box.tick(T0 + minute * MINUTE)


def test_interactive_ssh_session_keeps_the_box_up(box):
    box.add_session("alice", "pts/0")
    _minutes(box, 2 * IDLE_LIMIT_MINUTES, step=2)
    assert box.calls("shutdown") == []
    assert box.watchdog_state()["busy_reasons"] == ["ssh"]


def test_session_under_newer_opensshs_sshd_session_counts_too(box):
    shell = box.add_session("alice", "pts/3")
    parent = int((box.proc_dir / str(shell) / "stat").read_text().split()[3])
    (box.proc_dir / str(parent) / "comm").write_text("sshd-session\n")
    box.tick(T0)
    assert box.watchdog_state()["busy_reasons"] == ["ssh"]


def test_port_forward_tunnel_does_not_keep_the_box_up(box):
    # No terminal, so sshd writes no login record: only its process titles exist.
    box.add_process("sshd: alice [priv]")
    box.add_process("sshd: alice@notty")
    assert box.ticks_until_stop(T0, minutes=STOP_BOUND_MINUTES) is not None


def test_a_process_titled_like_a_session_is_not_one(box):
    box.add_process("sshd: alice@pts/0")
    box.tick(T0)
    assert box.watchdog_state()["busy_reasons"] == []


def test_a_logged_out_session_is_not_one(box):
    box.end_session(box.add_session("alice"))
    box.tick(T0)
    assert box.watchdog_state()["busy_reasons"] == []


def test_a_record_left_by_a_killed_sshd_is_not_a_session(box):
    shell = box.add_session("alice")
    for name in ("comm", "stat", "cmdline"):
        (box.proc_dir / str(shell) / name).unlink()
    (box.proc_dir / str(shell)).rmdir()
    box.tick(T0)
    assert box.watchdog_state()["busy_reasons"] == []


def test_a_record_whose_pid_now_belongs_to_another_program_is_not_a_session(box):
    shell = box.add_session("alice")
    (box.proc_dir / str(shell) / "stat").write_text(f"{shell} (cron) S 1 1 1 0 -1\n")
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


def test_a_running_lease_keeps_the_box_up(box):
    box.write_lease("hold", written_at=T0, minutes=30, reason="fab hold 30m")
    _minutes(box, 29, step=7)
    assert box.calls("shutdown") == []
    assert box.watchdog_state()["busy_reasons"] == ["lease"]
    assert box.watchdog_state()["signals"]["leases"] == [
        {"name": "hold", "reason": "fab hold 30m", "until": T0 + 30 * MINUTE}
    ]


def test_a_lease_expires_by_itself(box):
    box.write_lease("train-r1", written_at=T0, minutes=20, reason="fab train: starting")
    stopped = box.ticks_until_stop(T0 + 20 * MINUTE, minutes=STOP_BOUND_MINUTES)
    assert stopped is not None


def test_a_lease_is_capped_whatever_it_asks_for(box):
    box.write_lease("hold", written_at=T0, minutes=10 * 365 * 24 * 60, reason="forever")
    box.tick(T0 + 12 * 60 * MINUTE - 1)
    assert box.watchdog_state()["busy_reasons"] == ["lease"]
    stopped = box.ticks_until_stop(T0 + 12 * 60 * MINUTE, minutes=STOP_BOUND_MINUTES)
    assert stopped is not None


def test_a_lease_written_in_the_future_is_ignored(box):
    box.write_lease("hold", written_at=1e15, minutes=60, reason="clock games")
    box.tick(T0)
    assert box.watchdog_state()["busy_reasons"] == []


def test_a_lease_that_is_a_symlink_is_ignored(box, tmp_path):
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(f'{{"written_at": {T0}, "minutes": 60}}')
    (box.box_root / "leases").mkdir()
    (box.box_root / "leases" / "hold.json").symlink_to(elsewhere)
    box.tick(T0)
    assert box.watchdog_state()["busy_reasons"] == []


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
