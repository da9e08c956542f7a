"""The torchrun command line for a run on a box's GPUs, and across boxes.

What `fab train` will start in the trainer container (issue 17, phase B): one torchrun
per box, `--nproc-per-node` = the box's GPUs; with more than one box, a c10d
rendezvous on box 0's private address. torchrun (`python -m torch.distributed.run`)
is PyTorch's own elastic launcher: it sets RANK/LOCAL_RANK/WORLD_SIZE/MASTER_ADDR for
each worker, takes the whole group down when one worker dies and restarts it (the
trainer resumes from its last checkpoint) up to `--max-restarts` times.

Plain data in, an argv list out (no shell string): torch-free, like all of `ops`.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

RENDEZVOUS_PORT = 29400  # torchrun's default c10d port
MAX_RESTARTS = 3
# torchrun's wait between SIGTERM to its workers and SIGKILL: longer than the trainer's
# stop budget (trainer.loop.preemption.STOP_BUDGET_SECONDS, 100 s: checkpoint and upload),
# shorter than the container's stop timeout (120 s), after which docker kills torchrun.
SHUTDOWN_TIMEOUT_SECONDS = 110
# A fresh TCP store for every restart: torchrun's default shares its rendezvous store
# with the workers, and restarted workers then read the dead ones' addresses and fail
# to connect or hang (measured with torch 2.13 on gloo; pytorch#135712).
TORCHRUN_ENV = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
# NCCL over plain VPC/VNet TCP: no InfiniBand or EFA is assumed; NCCL_SOCKET_IFNAME
# is left to NCCL, which picks the interface that reaches the rendezvous address.
NCCL_ENV = {"NCCL_IB_DISABLE": "1", "NCCL_DEBUG": "WARN"}


@dataclass(frozen=True)
class DistributedLaunch:
    """One box's part of a run: its GPUs, the run's boxes and where they meet."""

    run_id: str
    gpus_per_box: int
    boxes: int = 1
    rendezvous_host: str | None = None
    """Box 0's private IP address; required when boxes > 1."""
    local_addr: str | None = None
    """This box's private IP address, the one the other boxes reach it on."""
    max_restarts: int = MAX_RESTARTS

    def __post_init__(self) -> None:
        if self.gpus_per_box < 1 or self.boxes < 1:
            raise ValueError(f"{self.gpus_per_box} GPUs x {self.boxes} boxes: need at least 1 x 1")
        if self.boxes > 1:
            for name in ("rendezvous_host", "local_addr"):
                address = getattr(self, name)
                if address is None or not ipaddress.ip_address(address).is_private:
                    raise ValueError(
                        f"{name} {address!r}: {self.boxes} boxes meet on a private IP address "
                        "(never a public one: the rendezvous and NCCL are unauthenticated)"
                    )

    @property
    def world_size(self) -> int:
        return self.gpus_per_box * self.boxes

    def argv(self, trainer_args: Sequence[str]) -> list[str]:
        """`python -m torch.distributed.run ... -m trainer TRAINER_ARGS` for this box."""
        argv = ["python", "-m", "torch.distributed.run", "--nproc-per-node", str(self.gpus_per_box)]
        if self.boxes == 1:
            argv.append("--standalone")  # a private rendezvous on a free local port
        else:
            argv += ["--nnodes", str(self.boxes), "--rdzv-backend", "c10d"]
            argv += ["--rdzv-endpoint", f"{self.rendezvous_host}:{RENDEZVOUS_PORT}"]
            argv += ["--rdzv-id", self.run_id, "--local-addr", str(self.local_addr)]
        argv += ["--max-restarts", str(self.max_restarts)]
        argv += ["--shutdown-timeout", str(SHUTDOWN_TIMEOUT_SECONDS)]
        return [*argv, "-m", "trainer", *trainer_args]

    def env(self) -> dict[str, str]:
        """Environment for torchrun (the container): restarts that reconnect, and NCCL
        settings for plain networking between boxes."""
        return {**TORCHRUN_ENV, **(NCCL_ENV if self.boxes > 1 else {})}
