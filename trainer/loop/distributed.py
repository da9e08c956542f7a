"""torch.distributed for the trainer: the process group, this rank, and the few
collectives the loop needs.

Under `python -m torch.distributed.run` (torchrun) every rank runs `python -m trainer
train` with RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set;
`init_process_group` reads them (env://). Without them the world is one rank and
nothing here talks to anything: every method returns its input.

One process group, two backends: tensors on a GPU go through NCCL (rank r drives
cuda:LOCAL_RANK): the gradients' all-reduce inside the step (`trainer.loop.gradient_sync`)
and the BatchNorm buffers; tensors on the CPU go through gloo: the control traffic
(the stop vote, the capture agreement, evaluation predictions, checkpoint states, the
barrier). None of that waits on a GPU stream or costs a host-device sync, and the vote
runs asynchronously, overlapping the steps between votes. On CPU everything is gloo.

Under torchrun the group is made even for one rank (`torchrun --nproc-per-node 1`): the
step then takes the data-parallel path, its all-reduce included, which is how one GPU
measures a multi-GPU box's step.

torchrun restarts the workers after a failure. By default its workers share the
rendezvous' TCP store, keys of the dead workers included, and the new workers' gloo
then tried to reach the old ones' ports (torch 2.13, pytorch#135712): launch torchrun
with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (`ops.run.distributed` does), which gives
every restart a fresh store.
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from trainer.config import UserError
from trainer.loop.gradient_sync import FlatGradients, broadcast_module

ENV_KEYS = ("RANK", "LOCAL_RANK", "WORLD_SIZE")
LOCAL_WORLD_SIZE = "LOCAL_WORLD_SIZE"  # torchrun's: the ranks on this box


@dataclass(frozen=True)
class RankInfo:
    """Who this process is in the run, as torchrun's environment says."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    launched: bool = False  # by torchrun (its environment is set), even for one rank
    local_world_size: int | None = None  # the ranks on this box; None: all of them

    @property
    def spans_boxes(self) -> bool:
        """Whether the ranks are on more than one box."""
        return self.local_world_size is not None and self.local_world_size < self.world_size

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> RankInfo:
        """RANK/LOCAL_RANK/WORLD_SIZE, or one rank when WORLD_SIZE is absent."""
        if "WORLD_SIZE" not in environ:
            return cls()
        try:
            rank, local_rank, world_size = (int(environ.get(key, "0")) for key in ENV_KEYS)
        except ValueError:
            seen = ", ".join(f"{key}={environ.get(key)!r}" for key in ENV_KEYS)
            raise UserError(
                f"{seen}: expected integers; start ranks with python -m torch.distributed.run"
            ) from None
        if not 0 <= rank < world_size or local_rank < 0:
            raise UserError(
                f"RANK {rank}, LOCAL_RANK {local_rank} of WORLD_SIZE {world_size}: expected "
                "0 <= RANK < WORLD_SIZE; start ranks with python -m torch.distributed.run"
            )
        local = environ.get(LOCAL_WORLD_SIZE, "")
        local_world_size = int(local) if local.isdigit() else None
        return cls(rank, local_rank, world_size, launched=True, local_world_size=local_world_size)

    @property
    def is_main(self) -> bool:
        """Rank 0: the one rank that writes checkpoints, status, logs and uploads."""
        return self.rank == 0


class Group:
    """This rank's view of the run: rank info plus the collectives the trainer uses."""

    def __init__(self, info: RankInfo | None = None) -> None:
        self.info = info or RankInfo()
        self._vote: tuple[Any, torch.Tensor] | None = None  # the all-reduce in flight

    @classmethod
    def start(cls, info: RankInfo) -> Group:
        """Join the process group (NCCL with a GPU per local rank, else gloo): under
        torchrun, one rank included; alone, none."""
        group = cls(info)
        if not info.launched:
            return group
        if torch.cuda.is_available():
            device = torch.device("cuda", info.local_rank)
            torch.cuda.set_device(device)  # before anything touches the GPU
            dist.init_process_group("cpu:gloo,cuda:nccl", device_id=device)
        else:
            dist.init_process_group("gloo")
        return group

    @property
    def rank(self) -> int:
        return self.info.rank

    @property
    def world_size(self) -> int:
        return self.info.world_size

    @property
    def is_main(self) -> bool:
        return self.info.is_main

    @property
    def backend(self) -> str:
        return dist.get_backend() if self.data_parallel else "none"

    @property
    def data_parallel(self) -> bool:
        """Whether the step all-reduces gradients (a process group exists)."""
        return self.info.launched and dist.is_initialized()

    def gradients(self, model: nn.Module, precision: str = "fp32") -> FlatGradients | None:
        """The flat gradient bucket the step all-reduces, with rank 0's weights and
        buffers on every rank (None without a process group: nothing to reduce); in
        bf16 between boxes at `precision` bf16 (`trainer.loop.gradient_sync`).

        BatchNorm's buffers are not synchronised at every forward: training uses batch
        statistics, and `sync_buffers` gives every rank rank 0's before an evaluation,
        which are the ones rank 0's checkpoints hold.
        """
        if not self.data_parallel:
            return None
        broadcast_module(model)
        bf16 = precision == "bf16" and self.info.spans_boxes
        return FlatGradients(list(model.parameters()), self.world_size, bf16)

    def agree(self, *values: int) -> tuple[int, ...]:
        """Element-wise max of `values` over all ranks.

        With more than one rank the answer is that of the previous call: each call
        starts an asynchronous all-reduce of a CPU tensor and collects the one before,
        which ran while this rank computed a step. Every rank acts on the same answer
        at the same step, one step after it was asked, and the all-reduce overlaps
        the step in between instead of holding up the loop (~1% of a CPU step, measured).
        """
        if self.world_size == 1:
            return values
        agreed = self._collect_vote() or (0,) * len(values)
        tensor = torch.tensor(values, dtype=torch.int64)
        work = dist.all_reduce(tensor, dist.ReduceOp.MAX, async_op=True)
        self._vote = (work, tensor)
        return agreed

    def least(self, value: int) -> int:
        """The smallest of every rank's `value`, on every rank (a gloo all-reduce)."""
        if self.world_size == 1:
            return value
        tensor = torch.tensor([value], dtype=torch.int64)
        dist.all_reduce(tensor, dist.ReduceOp.MIN)
        return int(tensor)

    def _collect_vote(self) -> tuple[int, ...] | None:
        if self._vote is None:
            return None
        work, tensor = self._vote
        work.wait()
        self._vote = None
        return tuple(int(value) for value in tensor.tolist())

    def broadcast_state(self, state: dict[str, Any] | None) -> dict[str, Any] | None:
        """Rank 0's `state` (a checkpoint dict, or None) on every rank.

        Sent as torch.save bytes and read back with weights_only=True, like a
        checkpoint file: no rank unpickles code from another.
        """
        if self.world_size == 1:
            return state
        payload = b""
        if self.is_main and state is not None:
            buffer = io.BytesIO()
            torch.save(state, buffer)
            payload = buffer.getvalue()
        received = self._broadcast_bytes(payload, 0)
        if not received:
            return None
        if self.is_main:
            return state
        return torch.load(io.BytesIO(received), weights_only=True)

    def first_failure(self, error: str | None) -> tuple[int, str] | None:
        """Every rank's outcome of one try (this rank's error line; None: it went well),
        agreed: the lowest rank that failed and its line, on every rank, or None where
        none did. A gloo MIN all-reduce (and the line's bytes from that rank): what the
        step's capture and the compile fallback decide by, so all ranks keep or drop
        their graphs together (`trainer.loop.step`)."""
        if self.world_size == 1:
            return None if error is None else (0, error)
        rank = self.least(self.world_size if error is None else self.rank)
        if rank == self.world_size:
            return None
        return rank, self._broadcast_bytes((error or "").encode(), rank).decode()

    def _broadcast_bytes(self, payload: bytes, source: int) -> bytes:
        """`source`'s `payload` on every rank (gloo: its size, then its bytes)."""
        size = torch.tensor([len(payload)], dtype=torch.int64)
        dist.broadcast(size, source)
        if int(size) == 0:
            return b""
        if self.rank == source:
            tensor = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
        else:
            tensor = torch.empty(int(size), dtype=torch.uint8)
        dist.broadcast(tensor, source)
        return payload if self.rank == source else tensor.numpy().tobytes()

    def shard(self, rows: int, batch_size: int) -> tuple[int, int]:
        """This rank's contiguous run of whole `batch_size` batches of `rows` rows, as
        (start, stop): every batch is one a single process would form too."""
        batches = -(-rows // batch_size)
        first = batches * self.rank // self.world_size
        last = batches * (self.rank + 1) // self.world_size
        return min(rows, first * batch_size), min(rows, last * batch_size)

    def all_gather_rows(self, local: np.ndarray) -> np.ndarray:
        """Every rank's 1-D `local`, concatenated in rank order, on every rank."""
        if self.world_size == 1:
            return local
        counts = [torch.zeros(1, dtype=torch.int64) for _ in range(self.world_size)]
        dist.all_gather(counts, torch.tensor([local.shape[0]]))
        sizes = [int(count) for count in counts]
        padded = torch.zeros(max(sizes), dtype=torch.from_numpy(local).dtype)
        padded[: local.shape[0]] = torch.from_numpy(local)
        parts = [torch.empty_like(padded) for _ in sizes]
        dist.all_gather(parts, padded)
        return np.concatenate(
            [part[:size].numpy() for part, size in zip(parts, sizes, strict=True)]
        )

    def sync_buffers(self, model: nn.Module) -> None:
        """Rank 0's buffers (BatchNorm statistics) on every rank, before an evaluation."""
        if self.world_size == 1:
            return
        works = [dist.broadcast(buffer, 0, async_op=True) for buffer in model.buffers()]
        for work in works:
            work.wait()

    def barrier(self) -> None:
        """Wait for every rank: an all-reduce of a CPU tensor, through gloo, not a GPU."""
        if self.world_size > 1:
            dist.all_reduce(torch.zeros(1))

    def close(self, *, clean: bool = True) -> None:
        """Leave the process group. `clean`: every rank got here on the same path, so
        wait for the others first; otherwise (a failure on this rank alone) just leave:
        the others learn of it from their next collective, and torchrun restarts all."""
        if not self.data_parallel:
            return
        if clean:
            self._collect_vote()
            self.barrier()
        dist.destroy_process_group()
