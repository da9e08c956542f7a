"""The torchrun command line for a run on a box's GPUs, and across boxes.

What `fab train` starts in the trainer container of a box with several GPUs, or of
each box of a multi-node stack: one torchrun per box, `--nproc-per-node` = the box's
GPUs; with more than one box, a c10d rendezvous on box 0's private address. torchrun
(`torch.distributed.run`) is PyTorch's own elastic launcher: it sets
RANK/LOCAL_RANK/WORLD_SIZE/MASTER_ADDR for each worker, takes the whole group down when
one worker dies and restarts it (the trainer resumes from its last checkpoint) up to
`--max-restarts` times. In the container it runs under `python -m trainer launch`
(`trainer.loop.launcher`), which turns torchrun's outcome into the trainer's exit codes.

Rank 0 is on box 0, always: the rendezvous numbers the boxes in the order of their
`--local-addr` (torch sorts its participants by it), so each box gives a name of its
rank order, `glucose-node-00`, `-01`..., that the container's /etc/hosts maps to the
box's private address (`host_entries`). Box 0 holds status.json, the checkpoints and
the logs; `fab status`, `logs` and `download` read it there.

Plain data in, argv lists out (no shell string): torch-free, like all of `ops`.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from stack import catalog

RENDEZVOUS_PORT = 29400  # torchrun's default c10d port
MAX_RESTARTS = 3
# torchrun's wait between SIGTERM to its workers and SIGKILL: longer than the trainer's
# stop budget (trainer.loop.preemption.STOP_BUDGET_SECONDS, 100 s: checkpoint and upload),
# shorter than the container's stop timeout (120 s), after which docker kills torchrun.
SHUTDOWN_TIMEOUT_SECONDS = 110
NODE_NAME_PREFIX = "glucose-node-"
# A fresh TCP store for every restart: torchrun's default shares its rendezvous store
# with the workers, and restarted workers then read the dead ones' addresses and fail
# to connect or hang (measured with torch 2.13 on gloo; pytorch#135712).
TORCHRUN_ENV = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
# Between boxes NCCL talks over what the size has (`stack.catalog.VmSize.fabric`):
# - InfiniBand (Azure ND): NCCL_IB_DISABLE is left unset, so NCCL takes IB where the
#   container sees the HCA and the image has the verbs libraries (libibverbs1 and
#   ibverbs-providers: the pytorch runtime base lacks them, and NCCL then says
#   "NET/IB : No device found" and uses sockets; docs/distributed.md "Fabric");
# - EFA (AWS p4d/p5): only through the aws-ofi-nccl plugin and libfabric, which the
#   image does not carry, on boxes launched with EFA interfaces in a cluster placement
#   group and a security group open to itself for all traffic
#   (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html,
#   https://docs.aws.amazon.com/batch/latest/userguide/efa.html), none of which the stack
#   declares: NCCL's sockets over ENA, IB off (NCCL's own verbs transport does not
#   speak EFA);
# - Ethernet elsewhere: sockets, IB off.
# NCCL's NET lines (INFO, that subsystem only) say which transport each rank took. The
# socket interface (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME) is the one holding the box's
# private address, set on the box by `trainer launch` (trainer.loop.launcher.
# socket_interfaces): NCCL by itself prefers ib* (IPoIB on ND96asr v4), which the other
# box may not reach.
NCCL_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "NET"}
NCCL_IB_OFF = {"NCCL_IB_DISABLE": "1"}
Fabric = Literal["ethernet", "infiniband", "efa"]


def fabric_of(vm_size: str, cloud: str) -> Fabric:
    """What links boxes of size `vm_size` (the catalog's `fabric`); Ethernet for a size
    the catalog does not know (a local or lab target)."""
    try:
        return catalog.lookup(vm_size, cloud).fabric
    except catalog.CatalogError:
        return "ethernet"


def node_name(node: int) -> str:
    """Box `node`'s name in the rendezvous: its rank order, sortable as text."""
    return f"{NODE_NAME_PREFIX}{node:02d}"


@dataclass(frozen=True)
class DistributedLaunch:
    """One box's part of a run: its GPUs, the run's boxes and where they meet."""

    run_id: str
    gpus_per_box: int
    addresses: tuple[str, ...] = ()
    """Every box's private IP address in rank order (box 0 first); () for one box."""
    node: int = 0
    """Which of the boxes this one is."""
    max_restarts: int = MAX_RESTARTS
    fabric: Fabric = "ethernet"
    """What links the boxes besides Ethernet (`fabric_of`)."""

    def __post_init__(self) -> None:
        if self.gpus_per_box < 1:
            raise ValueError(f"{self.gpus_per_box} GPUs a box: need at least 1")
        if not 0 <= self.node < self.boxes:
            raise ValueError(f"node {self.node} of {self.boxes} boxes")
        if self.boxes > 99:
            raise ValueError(f"{self.boxes} boxes: node names hold two digits")
        for address in self.addresses if self.boxes > 1 else ():
            if not _is_private(address):
                raise ValueError(
                    f"box address {address!r}: {self.boxes} boxes meet on private IP "
                    "addresses (never a public one: the rendezvous and NCCL are "
                    "unauthenticated)"
                )

    @property
    def boxes(self) -> int:
        return max(1, len(self.addresses))

    @property
    def world_size(self) -> int:
        return self.gpus_per_box * self.boxes

    def torchrun_args(self, trainer_args: Sequence[str]) -> list[str]:
        """torchrun's own arguments for this box, ending `-m trainer TRAINER_ARGS`."""
        args = ["--nproc-per-node", str(self.gpus_per_box)]
        if self.boxes == 1:
            args.append("--standalone")  # a private rendezvous on a free local port
        else:
            args += ["--nnodes", str(self.boxes), "--rdzv-backend", "c10d"]
            args += ["--rdzv-endpoint", f"{self.addresses[0]}:{RENDEZVOUS_PORT}"]
            args += ["--rdzv-id", self.run_id, "--local-addr", node_name(self.node)]
            # Box 0 serves the rendezvous store; the others only connect to it.
            args += ["--rdzv-conf", f"is_host={str(self.node == 0).lower()}"]
        args += ["--max-restarts", str(self.max_restarts)]
        args += ["--shutdown-timeout", str(SHUTDOWN_TIMEOUT_SECONDS)]
        return [*args, "-m", "trainer", *trainer_args]

    def argv(self, trainer_args: Sequence[str]) -> list[str]:
        """`python -m torch.distributed.run ...`: torchrun by itself, outside a container."""
        return ["python", "-m", "torch.distributed.run", *self.torchrun_args(trainer_args)]

    def container_args(self, trainer_args: Sequence[str]) -> list[str]:
        """The image's arguments (its entrypoint is `python -m trainer`): torchrun under
        the launcher that maps its outcome to the trainer's exit codes."""
        return ["launch", "--", *self.torchrun_args(trainer_args)]

    def env(self) -> dict[str, str]:
        """Environment for torchrun (the container): restarts that reconnect, and NCCL
        settings between boxes: InfiniBand left on where the boxes have it."""
        if self.boxes == 1:
            return dict(TORCHRUN_ENV)
        ib = {} if self.fabric == "infiniband" else NCCL_IB_OFF
        return {**TORCHRUN_ENV, **NCCL_ENV, **ib}

    def host_entries(self) -> dict[str, str]:
        """/etc/hosts lines for the container: each box's node name -> its address."""
        if self.boxes == 1:
            return {}
        return {node_name(node): address for node, address in enumerate(self.addresses)}


def _is_private(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_private
    except ValueError:
        return False
