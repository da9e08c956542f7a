"""`python -m trainer launch -- TORCHRUN_ARGS`: torchrun in the trainer container, with
the trainer's exit codes.

torchrun (`torch.distributed.run`, run here in-process) counts any worker's non-zero
exit as a failure: it restarts the group while `--max-restarts` remain, then exits 1.
The box's resume unit (box/resume.py) restarts only a container that
exited 75, and `fab` reads 0 as finished and 2 as a user error, so the container must
exit as a single trainer would. The launcher reads how the run ended from what this
box's local rank 0 recorded since the launch began:

- status.json on the box of rank 0 (box 0), heartbeat.json on any other box
  (`trainer.loop.rank_outputs.Heartbeat`); state finished -> 0, stopped or preempted -> 75,
  exit code 2 (user error) or 74 (run dir not writable) -> that code;
- nothing conclusive, and a rank of this box ended on 2 or 74 (it said so by its
  signal, `RELEASE_SIGNALS`: a run dir it cannot write holds no record of it) -> that
  code;
- nothing conclusive and the launcher itself was told to stop (SIGTERM from `docker
  stop`, a host shutdown; forwarded to the workers by torchrun) -> 75: interrupted;
- nothing conclusive and the boxes never met (the rendezvous timed out, or box 0's
  store did not answer: a box evicted and not back yet) -> 69: the box's resume unit
  starts it again a minute later, until the run's deadline, so the run comes back with
  its last box;
- else torchrun's own outcome (0, or 1 after its restarts ran out).

A rank that ends on a code no restart changes (75, 2, 74) tells torchrun to shut down
instead of restarting the group (`release_agent`): it signals its parent, the agent.
Every rank of every box does, so every box's container ends on the same code.

Across boxes NCCL and gloo talk over the interface that holds this box's private
address, the one `--local-addr` names (`socket_interfaces`): left to itself NCCL
prefers `ib*` interfaces, and on an ND96asr v4 with IPoIB it may take an address the
other box cannot reach, and hang. NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME in the
container's environment (a target's `containerEnv`) win over that choice.
"""

from __future__ import annotations

import argparse
import fcntl
import logging
import os
import signal
import socket
import struct
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

from box.contract import (
    EXIT_BOXES_AWAY,
    EXIT_FAILED,
    EXIT_FINISHED,
    EXIT_STOPPED,
    EXIT_UNWRITABLE,
    EXIT_USER_ERROR,
    FINISHED_STATES,
    HEARTBEAT_FILE,
    STATE_PREEMPTED,
    STATE_STOPPED,
    STATUS_FILE,
    RunRecord,
)
from trainer.config import UserError

log = logging.getLogger(__name__)

RECORD_FILES = (STATUS_FILE, HEARTBEAT_FILE)  # rank 0's box; any other box
STOPPED_STATES = (STATE_STOPPED, STATE_PREEMPTED)
# Codes no restart of the group changes: torchrun must end, not retry. A worker ending
# on one signals the launcher; the signal says which (SIGTERM is also `docker stop`'s,
# and means stopped either way).
RELEASE_SIGNALS = {
    EXIT_STOPPED: signal.SIGTERM,
    EXIT_USER_ERROR: signal.SIGUSR1,
    EXIT_UNWRITABLE: signal.SIGUSR2,
}
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# torchrun sets it in its workers' environment: this process is one of them.
WORKER_MARKER = "TORCHELASTIC_RUN_ID"
# The launcher's pid, for its workers: in a container it is PID 1, so "my parent" alone
# cannot tell the agent from init adopting an orphan.
LAUNCHER_PID = "GLUCOSE_LAUNCHER_PID"
SOCKET_INTERFACE_VARIABLES = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")
SIOCGIFADDR = 0x8915  # Linux ioctl: an interface's IPv4 address
IFNAMSIZ = 16


def interface_holding(address: str) -> str | None:
    """The network interface whose IPv4 address is `address`, or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _, name in socket.if_nameindex():
            request = struct.pack("256s", name.encode()[: IFNAMSIZ - 1])
            try:
                reply = fcntl.ioctl(probe.fileno(), SIOCGIFADDR, request)
            except OSError:  # an interface without an IPv4 address
                continue
            if socket.inet_ntoa(reply[20:24]) == address:
                return name
    return None


def socket_interfaces(local_addr: str | None, environ: Mapping[str, str]) -> dict[str, str]:
    """NCCL's and gloo's socket interface for a box that meets others as `local_addr`
    (torchrun's --local-addr: a name /etc/hosts maps to the box's private address);
    {} on one box (no --local-addr), when the environment names them already, or when
    no interface holds the address (then NCCL and gloo choose, as before, with a
    warning)."""
    if not local_addr or any(name in environ for name in SOCKET_INTERFACE_VARIABLES):
        return {}
    try:
        address = socket.gethostbyname(local_addr)
    except OSError as error:
        log.warning("launch: cannot resolve --local-addr %s (%s)", local_addr, error)
        return {}
    interface = interface_holding(address)
    if interface is None:
        log.warning("launch: no interface holds %s (%s); NCCL chooses", address, local_addr)
        return {}
    # "=eth0": exactly eth0 (a bare name is a prefix to NCCL: eth0 would match eth01).
    return {"NCCL_SOCKET_IFNAME": f"={interface}", "GLOO_SOCKET_IFNAME": interface}


def parse_torchrun(argv: list[str]) -> argparse.Namespace:
    """torchrun's own parse of `argv` (exit 2 on bad flags), which must run the trainer's
    `train` (`-m trainer train ...`)."""
    from torch.distributed.run import parse_args

    args = parse_args(argv)
    if not (args.module and args.training_script == "trainer"):
        raise UserError(
            f"launch runs `-m trainer train ...` under torchrun, not {args.training_script!r}"
        )
    if args.training_script_args[:1] != ["train"]:
        raise UserError("launch runs the trainer's `train` command: end with -m trainer train ...")
    return args


def world_size(args: argparse.Namespace) -> int | None:
    """Ranks the launch makes (None when torchrun decides, e.g. --nproc-per-node gpu)."""
    from torch.distributed.run import parse_min_max_nnodes

    _, max_nodes = parse_min_max_nnodes(args.nnodes)
    return int(args.nproc_per_node) * max_nodes if args.nproc_per_node.isdigit() else None


def launch(args: argparse.Namespace, run_dir: Path) -> int:
    """Run torchrun with `args`; the exit code of the run it launched."""
    from torch.distributed.elastic.multiprocessing import SignalException
    from torch.distributed.elastic.rendezvous import RendezvousError
    from torch.distributed.run import run

    started_at = time.time()

    def stop(signum: int, frame: Any) -> None:
        # As torchrun's own handler does once its workers run: its agent then sends the
        # signal to them and waits up to --shutdown-timeout. Installed first, so a stop
        # during the rendezvous ends the launch too (PID 1 ignores signals it does not
        # handle).
        raise SignalException(f"launcher got {signal.Signals(signum).name}", signal.Signals(signum))

    released: list[int] = []
    codes = {sig: code for code, sig in RELEASE_SIGNALS.items() if sig not in STOP_SIGNALS}

    def release(signum: int, frame: Any) -> None:
        # A rank ended on 2 or 74: stop the others as `docker stop` would, once (every
        # rank may say so; a second raise would cut torchrun's shutdown short).
        released.append(codes[signum])
        if len(released) == 1:
            raise SignalException(f"a rank ended on exit {released[0]}", signal.SIGTERM)

    for stop_signal in STOP_SIGNALS:
        signal.signal(stop_signal, stop)
    for release_signal in codes:
        signal.signal(release_signal, release)
    os.environ[LAUNCHER_PID] = str(os.getpid())
    interfaces = socket_interfaces(args.local_addr, os.environ)
    if interfaces:
        print(f"launch: NCCL and gloo over {interfaces['GLOO_SOCKET_IFNAME']}", flush=True)
    os.environ.update(interfaces)  # the workers inherit them
    signalled, code = False, EXIT_FINISHED
    try:
        run(args)
    except SignalException as error:
        signalled, code = not released, EXIT_FAILED
        print(f"launch: {error}; torchrun stopped its workers", file=sys.stderr, flush=True)
    except RendezvousError as error:
        code = EXIT_BOXES_AWAY
        print(
            f"launch: the run's boxes did not meet ({type(error).__name__}: {error}); "
            "the box starts it again a minute from now until the run's deadline",
            file=sys.stderr,
            flush=True,
        )
    except Exception as error:  # ChildFailedError: the restarts ran out
        code = EXIT_FAILED
        print(f"launch: torchrun failed: {error}", file=sys.stderr, flush=True)
    finally:
        for handled in (*STOP_SIGNALS, *codes):
            signal.signal(handled, signal.SIG_IGN)
    record = box_record(run_dir, started_at)
    outcome = exit_code(record, code, signalled, released[0] if released else None)
    print(
        f"launch: the run's record on this box says {record.state or 'nothing new'}"
        f"{'; stopped from outside' if signalled else ''}: exit {outcome}",
        file=sys.stderr,
        flush=True,
    )
    return outcome


def exit_code(
    record: RunRecord, torchrun_code: int, signalled: bool, released: int | None = None
) -> int:
    """The container's exit code from this box's record, torchrun's code, whether the
    launcher was stopped and the code a rank released it with (see the module
    docstring)."""
    state, code = record.state, record.exit_code
    if state in FINISHED_STATES:
        return EXIT_FINISHED
    if state in STOPPED_STATES:
        return EXIT_STOPPED
    if code in (EXIT_USER_ERROR, EXIT_UNWRITABLE):
        return code
    if released is not None:
        return released
    return EXIT_STOPPED if signalled else torchrun_code


def box_record(run_dir: Path, since: float) -> RunRecord:
    """The newest of this box's status.json / heartbeat.json written at `since` or
    later (an empty record when none is: a record of an earlier launch says nothing of
    this one), each read as the contract reads it (a time no finite number is none)."""
    records = [RunRecord.read(Path(run_dir), name) for name in RECORD_FILES]
    fresh = [r for r in records if r.updated_at is not None and r.updated_at >= since]
    return max(fresh, key=lambda r: r.updated_at or 0.0, default=RunRecord())


def exit_process(code: int) -> NoReturn:
    """Exit with `code`. A rank of a process group (a torchrun worker, or one started
    with WORLD_SIZE by hand), its files written and its group left, skips the
    interpreter's teardown: torch's C++ threads sometimes abort a finished rank there
    ("terminate called without an active exception", SIGABRT, after its last line: 4
    of ~35 two-box CPU runs while this machine was loaded, torch 2.13), and torchrun
    takes that for a failure and restarts the group; a rank without torchrun ends -6."""
    if os.environ.get(WORKER_MARKER) or os.environ.get("WORLD_SIZE", "1") != "1":
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def release_agent(code: int) -> None:
    """Under `launch`, on a code no restart changes: signal the agent (this worker's
    parent, the launcher) with the code's `RELEASE_SIGNALS`; it then stops its workers
    and ends on that code instead of restarting the group. Called as the worker exits:
    everything it had to write is written. A worker of a plain torchrun, or one
    orphaned, leaves its parent alone."""
    parent = os.getppid()
    launcher = os.environ.get(LAUNCHER_PID)
    if code in RELEASE_SIGNALS and os.environ.get(WORKER_MARKER) and launcher == str(parent):
        os.kill(parent, RELEASE_SIGNALS[code])
