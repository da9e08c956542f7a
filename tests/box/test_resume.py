"""The resume unit, the one restarter: interrupted runs start again, boundedly; others never."""

import pytest

from tests.fakes.fake_box import DEEPLY_NESTED_JSON, FakeBox

T0 = 1_800_000_000.0
MINUTE = 60.0
PREEMPTED = 75
IDLE_LIMIT_MINUTES = 3  # FakeBox's
# The trainer's limit on one try to upload when storage does not answer
# (trainer/checkpoints/final_upload.py SYNC_SECONDS).
UPLOAD_LIMIT_SECONDS = 300


@pytest.fixture
def box(tmp_path):
    return FakeBox(tmp_path, docker_wait_seconds=1)


def _resume(box, now=T0):
    done = box.run("resume.py", now=now)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def _started(box):
    return [call[1] for call in box.calls("docker") if call[0] == "start"]


def test_preempted_run_starts_again(box):
    container = box.add_trainer("run-1", running=False, created_at=T0 - 600, exit_code=PREEMPTED)
    box.write_status("run-1", state="preempted")
    done = _resume(box)
    assert _started(box) == [container]
    assert "starting run run-1 again" in done.stdout


def test_a_deeply_nested_status_json_does_not_stop_a_resume(box):
    # Written by the container, so anything: it reads as no status, and exit 75 decides.
    container = box.add_trainer("run-1", running=False, created_at=T0 - 600, exit_code=PREEMPTED)
    (box.box_root / "runs" / "run-1" / "status.json").write_text(DEEPLY_NESTED_JSON)
    _resume(box)
    assert _started(box) == [container]


def test_run_killed_with_the_host_starts_again_after_the_boot(box):
    container = box.add_trainer("run-1", running=False, created_at=T0 - 600, exit_code=137)
    box.write_status("run-1", state="running")
    box.reboot("boot-2", at=T0 - 60)
    _resume(box)
    assert _started(box) == [container]


def test_a_box_of_workers_resumes_from_its_heartbeat_after_the_boot(box):
    # Box 1 of a multi-node run: rank 0 (and status.json) is on box 0; its own ranks
    # keep heartbeat.json. Killed with the host, it starts again like box 0.
    container = box.add_trainer("run-1", running=False, created_at=T0 - 600, exit_code=137)
    heartbeat = box.box_root / "runs" / "run-1" / "heartbeat.json"
    heartbeat.parent.mkdir(parents=True, exist_ok=True)
    heartbeat.write_text('{"step": 40, "state": "running", "exit_code": null, "updated_at": 1}')
    box.reboot("boot-2", at=T0 - 60)
    _resume(box)
    assert _started(box) == [container]


def test_run_that_crashed_in_this_boot_stays_down(box):
    # Killed by the kernel (OOM) while the box stayed up: a failure, never a restart loop.
    box.add_trainer("run-1", running=False, created_at=T0 - 600, exit_code=137)
    box.write_status("run-1", state="running")
    done = _resume(box)
    assert _started(box) == []
    assert "a failure" in done.stdout


def test_run_stopped_by_the_user_stays_down(box):
    box.add_trainer("run-1", running=False, created_at=T0 - 600, exit_code=PREEMPTED)
    box.write_status("run-1", state="stopped")
    (box.box_root / "runs" / "run-1" / "STOPPED_BY_USER").touch()
    box.reboot("boot-2", at=T0 - 60)
    done = _resume(box)
    assert _started(box) == []
    assert "stopped by the user" in done.stdout


@pytest.mark.parametrize(
    ("exit_code", "state", "why"),
    [
        (0, "finished", "finished"),
        (2, "failed", "exited 2: a user error"),
        (1, "failed", "a failure"),
    ],
)
def test_finished_and_failed_runs_stay_down_even_after_a_boot(box, exit_code, state, why):
    box.add_trainer("run-1", running=False, created_at=T0 - 600, exit_code=exit_code)
    box.write_status("run-1", state=state)
    box.reboot("boot-2", at=T0 - 60)
    done = _resume(box)
    assert _started(box) == []
    assert why in done.stdout


def _deadline(box, run_id, at):
    launch = box.box_root / "runs" / run_id / "launch.json"
    launch.parent.mkdir(parents=True, exist_ok=True)
    launch.write_text(f'{{"run_id": "{run_id}", "deadline": {at}}}')


def test_an_evicted_run_before_its_deadline_starts_again_after_the_boot(box):
    container = box.add_trainer("run-1", running=False, created_at=T0 - 600, exit_code=137)
    box.write_status("run-1", state="running")
    _deadline(box, "run-1", T0 + 3600)
    box.reboot("boot-2", at=T0 - 60)
    _resume(box)
    assert _started(box) == [container]


def test_a_run_brought_back_past_its_deadline_stays_down(box):
    # The cloud restarted the box late (capacity came back after the hard stop's time):
    # training now would bill past the deadline; the idle watchdog stops the box.
    box.add_trainer("run-1", running=False, created_at=T0 - 600, exit_code=PREEMPTED)
    box.write_status("run-1", state="preempted")
    _deadline(box, "run-1", T0 - 1)
    box.reboot("boot-2", at=T0 - 60)
    done = _resume(box)
    assert _started(box) == []
    assert "past its deadline" in done.stdout


def test_a_run_past_its_deadline_still_uploads_what_storage_lacked(box):
    container = box.add_trainer("run-1", running=False, created_at=T0 - 600, exit_code=0)
    box.write_status("run-1", state="finished-upload-pending")
    _deadline(box, "run-1", T0 - 1)
    _resume(box)
    assert _started(box) == [container]


BOXES_AWAY = 69


def test_a_box_whose_peers_are_away_tries_again_every_minute_until_the_deadline(box):
    # Box 0 of a two-box run; box 1 was evicted and is not back: each rendezvous times out.
    container = box.add_trainer(
        "run-1", running=False, created_at=T0 - 600, exit_code=BOXES_AWAY, finished_at=T0
    )
    _deadline(box, "run-1", T0 + 10 * MINUTE)
    starts = []
    for minute in range(0, 15):
        now = T0 + minute * MINUTE
        _resume(box, now=now)
        if box.containers()[0]["State"]["Running"]:
            starts.append(minute)
            box.exit_container(container, exit_code=BOXES_AWAY, at=now + 1)
    # More than the three starts a boot allows a run that keeps exiting 75, none past
    # the deadline.
    assert starts == [1, 3, 5, 7, 9]


def test_finished_run_whose_uploads_are_pending_starts_again_to_upload(box):
    container = box.add_trainer("run-1", running=False, created_at=T0 - 600, exit_code=0)
    box.write_status("run-1", state="finished-upload-pending")
    _resume(box)
    assert _started(box) == [container]


# 69 with no deadline: a box whose peers are away is bounded like a stop.
@pytest.mark.parametrize("code", [PREEMPTED, BOXES_AWAY], ids=["stopped-75", "peers-away-69"])
def test_a_run_that_keeps_exiting_to_be_resumed_is_started_three_times_per_boot(box, code):
    container = box.add_trainer(
        "run-1", running=False, created_at=T0 - 600, exit_code=code, finished_at=T0
    )
    for minute in range(0, 30):
        now = T0 + minute * MINUTE
        _resume(box, now=now)
        if box.containers()[0]["State"]["Running"]:
            box.exit_container(container, exit_code=code, at=now + 1)
    assert _started(box) == [container] * 3


def test_later_starts_wait_longer_after_the_exit(box):
    container = box.add_trainer(
        "run-1", running=False, created_at=T0 - 600, exit_code=PREEMPTED, finished_at=T0
    )
    _resume(box, now=T0)
    box.exit_container(container, exit_code=PREEMPTED, at=T0 + 10)
    done = _resume(box, now=T0 + 40)
    assert len(_started(box)) == 1
    assert "start 2 in 30s" in done.stdout


def test_a_new_boot_starts_the_count_over(box):
    box.add_trainer(
        "run-1", running=False, created_at=T0 - 600, exit_code=PREEMPTED, finished_at=T0
    )
    (box.root / "run").mkdir()
    (box.root / "run" / "resume-state.json").write_text(
        '{"boot_id": "boot-1", "runs": {"run-1": {"attempts": 3}}}'
    )
    assert "started 3 times" in _resume(box).stdout
    box.reboot("boot-2", at=T0 + 60)
    _resume(box, now=T0 + 120)
    assert len(_started(box)) == 1


def test_uncountable_attempts_start_nothing(tmp_path):
    (tmp_path / "full-disk").write_text("")
    box = FakeBox(
        tmp_path / "box",
        docker_wait_seconds=1,
        resume_state_path=str(tmp_path / "full-disk" / "resume-state.json"),
    )
    box.add_trainer("run-1", running=False, created_at=T0 - 600, exit_code=PREEMPTED)
    done = box.run("resume.py", now=T0)
    assert done.returncode == 1
    assert _started(box) == []


def test_runs_on_the_box_at_once_killed_with_the_host_all_start_again_once_each(box):
    older = box.add_trainer("older", running=False, created_at=T0 - 7200, exit_code=137)
    box.write_status("older", state="running")
    newer = box.add_trainer("newer", running=False, created_at=T0 - 3600, exit_code=137)
    box.write_status("newer", state="running")
    box.reboot("boot-2", at=T0 - 60)
    _resume(box)
    assert _started(box) == [newer, older]


def test_an_older_preempted_run_starts_again_beside_a_newer_finished_one(box):
    older = box.add_trainer("older", running=False, created_at=T0 - 7200, exit_code=PREEMPTED)
    box.write_status("older", state="preempted")
    box.add_trainer("newer", running=False, created_at=T0 - 3600, exit_code=0)
    box.write_status("newer", state="finished")
    done = _resume(box)
    assert _started(box) == [older]
    assert "run newer stays down: finished" in done.stdout


def test_sweeps_on_the_box_at_once_stopped_by_an_eviction_all_start_again(box):
    older = box.add_sweep("sweep-a", running=False, created_at=T0 - 7200, exit_code=PREEMPTED)
    box.write_sweep_status("sweep-a", state="stopped", exit_code=PREEMPTED)
    newer = box.add_sweep("sweep-b", running=False, created_at=T0 - 3600, exit_code=PREEMPTED)
    box.write_sweep_status("sweep-b", state="stopped", exit_code=PREEMPTED)
    _resume(box)
    assert _started(box) == [newer, older]


def test_a_running_run_is_left_alone(box):
    box.add_trainer("run-1", running=True, created_at=T0)
    done = _resume(box)
    assert _started(box) == []
    assert "is running" in done.stdout


def test_box_without_runs_has_nothing_to_resume(box):
    done = _resume(box)
    assert "nothing to resume" in done.stdout


def test_docker_that_never_answers_fails_the_unit(box):
    box.set_docker_up(False)
    done = box.run("resume.py")
    assert done.returncode == 1
    assert "docker did not answer within 1s" in done.stdout


def test_uploads_that_keep_failing_keep_the_box_up_no_longer_than_an_idle_one(box):
    container = box.add_trainer("run-1", running=False, created_at=T0 - 3600, finished_at=T0)
    box.write_status("run-1", state="finished-upload-pending", updated_at=T0)
    started_at = None

    def storage_stays_down(now):
        # Each start tries to upload until its limit and exits 0 (the run itself is done);
        # the resume unit starts it again, up to 3 times in this boot.
        nonlocal started_at
        if started_at is not None and now - started_at >= UPLOAD_LIMIT_SECONDS:
            box.exit_container(container, exit_code=0, at=now)
            started_at = None
        starts = len(_started(box))
        _resume(box, now)
        if len(_started(box)) > starts:
            started_at = now

    bound_minutes = IDLE_LIMIT_MINUTES + 2  # docs/guard-rails.md: idle + 2 min after the exit
    stopped = box.ticks_until_stop(T0, minutes=bound_minutes, between=storage_stays_down)
    assert stopped is not None
    assert _started(box) == [container]  # the upload was tried meanwhile


def test_a_sweep_stopped_with_its_trials_checkpointed_starts_again(box):
    container = box.add_sweep("sweep-1", running=False, created_at=T0 - 600, exit_code=PREEMPTED)
    box.write_sweep_status("sweep-1", state="stopped", exit_code=PREEMPTED)
    _resume(box)
    assert _started(box) == [container]


def test_a_sweep_stopped_by_the_user_stays_down(box):
    box.add_sweep("sweep-1", running=False, created_at=T0 - 600, exit_code=PREEMPTED)
    (box.box_root / "sweeps" / "sweep-1" / "STOPPED_BY_USER").touch()
    assert "sweep sweep-1 stays down: stopped by the user" in _resume(box).stdout
    assert _started(box) == []


def test_a_run_and_a_sweep_killed_with_the_host_both_start_again(box):
    run = box.add_trainer("run-1", running=False, created_at=T0 - 900, exit_code=137)
    box.write_status("run-1", state="running")
    sweep = box.add_sweep("run-1", running=False, created_at=T0 - 600, exit_code=137)
    box.write_sweep_status("run-1", state="running")
    box.reboot("boot-2", at=T0 - 60)
    _resume(box)
    # Same id, counted apart: each gets its own three starts.
    assert _started(box) == [run, sweep]


RENDEZVOUS_MINUTES = 2


def test_a_box_whose_peers_never_return_stops_itself_after_the_peer_wait(tmp_path):
    # Box 0 of a two-box run whose box 1 never comes back, with 72 h to its deadline:
    # the tries end after peerWaitMinutes and the idle watchdog stops the box.
    box = FakeBox(tmp_path, docker_wait_seconds=1, peer_wait_minutes=10)
    container = box.add_trainer(
        "run-1", running=False, created_at=T0 - 600, exit_code=BOXES_AWAY, finished_at=T0
    )
    _deadline(box, "run-1", T0 + 72 * 60 * MINUTE)

    tried_at = []

    def peers_stay_away(now):  # each try waits 2 min at the rendezvous, busy, then exits 69
        if tried_at and now - tried_at[-1] >= RENDEZVOUS_MINUTES * MINUTE:
            box.exit_container(container, exit_code=BOXES_AWAY, at=now)
            tried_at.clear()
        if not box.containers()[0]["State"]["Running"]:
            _resume(box, now=now)
            if box.containers()[0]["State"]["Running"]:
                tried_at.append(now)

    bound = 10 + RENDEZVOUS_MINUTES + IDLE_LIMIT_MINUTES + 2
    stopped = box.ticks_until_stop(T0, minutes=bound, between=peers_stay_away)
    assert stopped is not None, box.watchdog_state()
    assert "(peerWaitMinutes 10)" in _resume(box, now=stopped).stdout


def test_a_second_peer_outage_in_one_boot_gets_its_own_peer_wait(tmp_path):
    # Box 0 of a two-box run: box 1 is evicted, comes back, the boxes train together for
    # half an hour, then box 1 is evicted again, all in one boot of box 0.
    box = FakeBox(tmp_path, docker_wait_seconds=1, peer_wait_minutes=10)
    container = box.add_trainer(
        "run-1", running=False, created_at=T0 - 600, exit_code=BOXES_AWAY, finished_at=T0
    )
    box.write_status("run-1", state="running", step=100)
    _deadline(box, "run-1", T0 + 72 * 60 * MINUTE)
    _resume(box, now=T0 + MINUTE)
    assert _started(box) == [container]  # the first outage: the boxes meet again
    box.write_status("run-1", state="running", step=900)  # and train 30 minutes
    box.exit_container(container, exit_code=BOXES_AWAY, at=T0 + 31 * MINUTE)
    _resume(box, now=T0 + 32 * MINUTE)
    assert _started(box) == [container, container]
