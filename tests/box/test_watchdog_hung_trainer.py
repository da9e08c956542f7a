"""A trainer keeps the box up by making progress (its step advancing), not by GPU use;
so does a `fab prepare-data` container, by its heartbeat's step."""

import pytest

from tests.fakes.fake_box import FakeBox

T0 = 1_800_000_000.0
MINUTE = 60.0
IDLE_LIMIT_MINUTES = 3
HUNG_LIMIT_MINUTES = 10
# Goal of issue 13: with a trainer, the bill stops within idle + hung + 2 minutes.
HUNG_STOP_BOUND_MINUTES = IDLE_LIMIT_MINUTES + HUNG_LIMIT_MINUTES + 2
NAME = "vitaldb-m1"


@pytest.fixture
def box(tmp_path):
    return FakeBox(
        tmp_path,
        idle_shutdown_minutes=IDLE_LIMIT_MINUTES,
        hung_trainer_minutes=HUNG_LIMIT_MINUTES,
    )


def test_trainer_whose_step_advances_keeps_the_box_up_with_an_idle_gpu(box):
    # Loading data, evaluating, uploading: the GPU rests, the run moves on.
    box.add_trainer("run-1", running=True, created_at=T0 - 3600)
    for minute in range(0, 3 * HUNG_LIMIT_MINUTES, 4):
        box.write_status("run-1", step=minute, updated_at=T0 + minute * MINUTE)
        box.tick(T0 + minute * MINUTE)
    assert box.calls("shutdown") == []
    assert box.watchdog_state()["busy_reasons"] == ["trainer"]


def test_hung_trainer_at_full_gpu_stops_the_box(box):
    # A hung collective or a dead loop: 100 % GPU, no step for ever.
    box.add_trainer("run-1", running=True, created_at=T0 - 3600)
    box.write_status("run-1", step=500, updated_at=T0)
    box.set_gpu(100)
    stopped = box.ticks_until_stop(T0, minutes=HUNG_STOP_BOUND_MINUTES)
    assert stopped is not None
    assert stopped - T0 <= HUNG_STOP_BOUND_MINUTES * MINUTE
    assert box.watchdog_state()["hung_run_ids"] == ["run-1"]
    assert box.stops()[-1]["by"] == "hung-trainer"


def test_a_fresh_trainer_gets_the_hung_limit_to_show_its_first_step(box):
    box.add_trainer("run-1", running=True, created_at=T0, started_at=T0)
    for minute in range(0, HUNG_LIMIT_MINUTES, 3):
        box.tick(T0 + minute * MINUTE)
    assert box.calls("shutdown") == []
    assert box.watchdog_state()["busy_reasons"] == ["trainer"]


def test_trainer_that_never_shows_a_step_stops_the_box(box):
    box.add_trainer("run-1", running=True, created_at=T0, started_at=T0)
    assert box.ticks_until_stop(T0, minutes=HUNG_STOP_BOUND_MINUTES) is not None


def test_a_heartbeat_file_is_progress_too(box):
    # A box that holds only workers of a multi-node run: no status.json, a heartbeat.
    box.add_trainer("run-1", running=True, created_at=T0 - 3600)
    heartbeat = box.box_root / "runs" / "run-1" / "heartbeat.json"
    for minute in range(0, 3 * HUNG_LIMIT_MINUTES, 4):
        heartbeat.write_text(f'{{"step": {minute}, "updated_at": {T0 + minute * MINUTE}}}')
        box.tick(T0 + minute * MINUTE)
    assert box.calls("shutdown") == []


def test_a_box_of_workers_in_a_hung_collective_stops_though_its_gpu_is_busy(box):
    # NCCL waiting for a peer that is gone spins its GPU at 100 %; the heartbeat's step
    # stays where the run stopped advancing.
    box.add_trainer("run-1", running=True, created_at=T0 - 3600)
    heartbeat = box.box_root / "runs" / "run-1" / "heartbeat.json"
    heartbeat.write_text(f'{{"step": 500, "state": "running", "updated_at": {T0}}}')
    box.set_gpu(100)
    stopped = box.ticks_until_stop(T0, minutes=HUNG_STOP_BOUND_MINUTES)
    assert stopped is not None and stopped - T0 <= HUNG_STOP_BOUND_MINUTES * MINUTE
    assert box.watchdog_state()["hung_run_ids"] == ["run-1"]
    assert box.stops()[-1]["by"] == "hung-trainer"


def test_crash_looping_trainer_is_idle_not_busy_from_its_fresh_start(box):
    # An old container under docker's on-failure policy: restarted every minute, each
    # start fresh, never a step. The loop must not look like work.
    container = box.add_trainer("run-1", running=False, created_at=T0 - 600, restarting=True)

    def restart(now):
        box.restart_by_docker(container, at=now - 5)

    stopped = box.ticks_until_stop(T0, minutes=IDLE_LIMIT_MINUTES + 2, between=restart)
    assert stopped is not None
    assert box.watchdog_state()["busy_reasons"] == []


def test_a_container_caught_running_in_a_crash_loop_needs_progress(box):
    box.add_trainer("run-1", running=True, created_at=T0 - 600, started_at=T0, restart_count=7)
    box.tick(T0)
    assert "trainer" not in box.watchdog_state()["busy_reasons"]


def test_ssh_session_keeps_a_box_with_a_hung_trainer_up(box):
    box.add_trainer("run-1", running=True, created_at=T0 - 3600)
    box.add_session("alice")
    assert box.ticks_until_stop(T0, minutes=HUNG_STOP_BOUND_MINUTES) is None


def test_stopped_trainer_container_is_not_busy(box):
    box.add_trainer("run-1", running=False, created_at=T0 - 600, exit_code=0)
    assert box.ticks_until_stop(T0, minutes=IDLE_LIMIT_MINUTES + 2) is not None


# --- fab prepare-data's container ------------------------------------------------


def test_a_preparation_whose_heartbeat_moves_keeps_the_box_up(box):
    # A detached preparation: nobody follows it, no lease, no GPU; cases keep finishing.
    box.add_preparation(NAME, created_at=T0 - 3600)
    for minute in range(0, 3 * HUNG_LIMIT_MINUTES, 4):
        box.write_preparation_heartbeat(NAME, step=minute, updated_at=T0 + minute * MINUTE)
        box.tick(T0 + minute * MINUTE)
    assert box.calls("shutdown") == []
    assert box.watchdog_state()["busy_reasons"] == ["preparation"]


def test_a_hung_preparation_still_ends_in_a_stop(box):
    box.add_preparation(NAME, created_at=T0 - 3600)
    box.write_preparation_heartbeat(NAME, step=40, updated_at=T0)
    stopped = box.ticks_until_stop(T0, minutes=HUNG_STOP_BOUND_MINUTES)
    assert stopped is not None
    assert stopped - T0 <= HUNG_STOP_BOUND_MINUTES * MINUTE
    state = box.watchdog_state()
    assert (state["hung_preparations"], state["hung_run_ids"]) == ([NAME], [])
    assert box.stops()[-1]["by"] == "idle-watchdog"
    assert f"preparation {NAME} hung (no progress for 10 min)" in box.stops()[-1]["summary"]


def test_a_fresh_preparation_gets_the_hung_limit_to_write_its_first_heartbeat(box):
    # Fetching the lab table and the track list comes before the first case.
    box.add_preparation(NAME, created_at=T0)
    for minute in range(0, HUNG_LIMIT_MINUTES, 3):
        box.tick(T0 + minute * MINUTE)
    assert box.calls("shutdown") == []
    assert box.ticks_until_stop(T0 + HUNG_LIMIT_MINUTES * MINUTE, minutes=6) is not None


def test_a_preparation_and_a_run_of_the_same_name_are_told_apart(box):
    # The run is hung; the preparation of a dataset with the run's name is not.
    box.add_trainer(NAME, running=True, created_at=T0 - 3600)
    box.write_status(NAME, step=7, updated_at=T0 - 3600)
    box.add_preparation(NAME, created_at=T0 - 3600)
    for minute in range(0, 2 * HUNG_LIMIT_MINUTES, 4):
        box.write_preparation_heartbeat(NAME, step=minute, updated_at=T0 + minute * MINUTE)
        box.tick(T0 + minute * MINUTE)
    state = box.watchdog_state()
    assert (state["busy_reasons"], state["hung_run_ids"]) == (["preparation"], [NAME])


def test_a_container_that_only_looks_like_a_preparation_is_not_one(box):
    # Named like one, but without the label `fab prepare-data` gives it.
    box.add_trainer("x", running=True, created_at=T0 - 3600, name=f"glucose-prepare-{NAME}")
    box.write_preparation_heartbeat(NAME, step=1, updated_at=T0)
    assert box.explain(T0)["signals"]["preparations"] == []


# --- fab sweep's driver ------------------------------------------------------------


def test_a_sweep_whose_trials_make_progress_keeps_the_box_up(box):
    # The driver's own container trains nothing: its trials' steps, added up, move.
    box.add_sweep("sweep-1", running=True, created_at=T0 - 3600)
    for minute in range(0, 3 * HUNG_LIMIT_MINUTES, 4):
        box.write_sweep_status("sweep-1", step=10 * minute, updated_at=T0 + minute * MINUTE)
        box.tick(T0 + minute * MINUTE)
    assert box.calls("shutdown") == []
    assert box.watchdog_state()["busy_reasons"] == ["sweep"]


def test_a_sweep_whose_trials_stall_ends_in_a_stop_that_names_it(box):
    box.add_sweep("sweep-1", running=True, created_at=T0 - 3600)
    box.write_sweep_status("sweep-1", step=40, updated_at=T0)
    assert box.ticks_until_stop(T0, minutes=HUNG_STOP_BOUND_MINUTES) is not None
    assert box.watchdog_state()["hung_sweeps"] == ["sweep-1"]
    assert "sweep sweep-1 hung (no trial moved for 10 min)" in box.stops()[-1]["summary"]
