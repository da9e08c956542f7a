"""Pick the device and the precision, and say what hardware the run is on.

On a GPU it prints name, compute capability, driver and CUDA versions before any
work, and refuses to start when this torch build has no kernels for the GPU's
architecture (e.g. a CUDA 13 build on a V100, sm_70): otherwise the first kernel
launch fails deep inside the first step with "no kernel image is available".

A machine with NVIDIA GPUs on which CUDA does not start (a driver too old for the
image's CUDA, nvidia-fabricmanager down on an NVSwitch box: error 802, a container
started without `--gpus`) is refused too: it would train on the CPU at the GPU's
price, and its heartbeat would keep the idle watchdog from stopping the box.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainer.config import UserError

PRECISION_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
NVIDIA_SMI_TIMEOUT_SECONDS = 10
# bf16 tensor cores (and cuDNN's bf16 convolutions) start with Ampere, sm_80.
# torch.cuda.is_bf16_supported() also counts emulation: True on V100/T4 (sm_70/75),
# where bf16 convolutions would fall back to slow paths.
NATIVE_BF16_CAPABILITY = (8, 0)
# What shows NVIDIA GPUs on a machine whether or not CUDA starts: the device nodes,
# and the kernel driver's list of GPUs, which a container without --gpus still sees.
NVIDIA_DEVICE_GLOBS = ("dev/nvidia[0-9]*", "proc/driver/nvidia/gpus/*")
# Values of CUDA_VISIBLE_DEVICES that hide every GPU on purpose.
HIDDEN_GPU_VALUES = ("", "-1", "none", "void")
GIB = 2**30


@dataclass(frozen=True)
class DeviceChoice:
    device: torch.device
    precision: str  # bf16 | fp16 | fp32, resolved from "auto"
    description: str

    @property
    def autocast_dtype(self) -> torch.dtype:
        return PRECISION_DTYPES[self.precision]

    @property
    def needs_grad_scaler(self) -> bool:
        # fp16 gradients underflow without loss scaling; bf16 has fp32's exponent range.
        return self.precision == "fp16"

    def autocast(self, cache: bool = True) -> contextlib.AbstractContextManager:
        """Mixed precision at the run's precision. `cache=False` inside a CUDA graph:
        autocast's cache of cast weights is freed at the context's exit, under the
        graph's feet."""
        if self.precision == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype, cache_enabled=cache)

    def optimizer(
        self,
        parameters: Iterable[nn.Parameter] | Iterable[dict[str, Any]],
        lr: float,
        weight_decay: float,
        beta2: float = 0.999,
    ) -> torch.optim.AdamW:
        """AdamW over `parameters` (or parameter groups, each with its weight decay). On a
        GPU fused into a few kernels a step, and capturable with its learning rate a
        device tensor (the scheduler fills it; a CUDA graph replays the step,
        `trainer.loop.step`); on the CPU torch's default implementation, as before
        (bitwise resume there)."""
        cuda = self.device.type == "cuda"
        optimizer = torch.optim.AdamW(
            parameters,
            lr=lr,
            betas=(0.9, beta2),
            weight_decay=weight_decay,
            fused=True if cuda else None,
            capturable=cuda,
        )
        for group in optimizer.param_groups:
            # Each group's own device tensor on a GPU (one shared tensor would be
            # filled once per group); the schedule's base as a float: it writes each
            # step's rate into the tensor without reading the tensor back (a host sync).
            group["lr"] = torch.tensor(lr, device=self.device) if cuda else lr
            group["initial_lr"] = lr
        return optimizer

    def adopt(self, optimizer: torch.optim.Optimizer) -> None:
        """After `load_state_dict`: the saved groups' settings replaced ours (a float
        rate and no capture from an older or a CPU run, a GPU tensor on the CPU); put
        this device's back, keeping the saved rates."""
        cuda = self.device.type == "cuda"
        for group in optimizer.param_groups:
            rate, initial = float(group["lr"]), group.get("initial_lr")
            group["lr"] = torch.tensor(rate, device=self.device) if cuda else rate
            if initial is not None:
                group["initial_lr"] = float(initial)
            group["fused"], group["capturable"] = (True if cuda else None), cuda
        for state in optimizer.state.values():
            # load_state_dict leaves `step` where the saved groups said (on the CPU for a
            # CPU run's checkpoint); fused, capturable AdamW needs it beside the weights,
            # the CPU's plain AdamW on the CPU.
            if isinstance(state.get("step"), torch.Tensor):
                state["step"] = state["step"].to(self.device if cuda else "cpu", torch.float32)

    def end_marker(self) -> Callable[[], bool]:
        """What says when the work queued so far has ended (`trainer.loop.step_deadline`):
        a CUDA event's query on a GPU, whose work runs behind the host; on the CPU it has
        ended already."""
        if self.device.type != "cuda":
            return _ended
        event = torch.cuda.Event()
        event.record()
        return event.query

    def synchronize(self) -> None:
        """Wait for the GPU's queued work (timing); nothing to wait for on the CPU."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def peak_memory_gib(self) -> float | None:
        """The most GPU memory torch has held for tensors since the start; None on CPU."""
        if self.device.type != "cuda":
            return None
        return torch.cuda.max_memory_allocated(self.device) / GIB


def _ended() -> bool:
    return True


def _driver_version() -> str:
    try:
        result = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=NVIDIA_SMI_TIMEOUT_SECONDS,
            check=True,
        )
        return result.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return "unknown (nvidia-smi unavailable)"


def _parse_arch(arch: str) -> tuple[str, int, int, bool] | None:
    """'sm_90a' -> ('sm', 9, 0, True); None for anything unrecognised."""
    match = re.fullmatch(r"(sm|compute)_(\d+)([a-z]?)", arch)
    if match is None:
        return None
    digits = match.group(2)
    return match.group(1), int(digits[:-1]), int(digits[-1]), bool(match.group(3))


def check_arch_supported(capability: tuple[int, int], arch_list: list[str]) -> None:
    """Raise UserError when `arch_list` (torch.cuda.get_arch_list()) cannot run on the GPU."""
    major, minor = capability

    def runs(arch: str) -> bool:
        parsed = _parse_arch(arch)
        if parsed is None:
            return False
        kind, a_major, a_minor, specific = parsed
        if specific:  # sm_90a-style code runs on exactly that architecture
            return (a_major, a_minor) == (major, minor)
        if kind == "sm":  # SASS runs on the same major at an equal or higher minor
            return a_major == major and a_minor <= minor
        return (a_major, a_minor) <= (major, minor)  # PTX JIT-compiles forward

    if not any(runs(arch) for arch in arch_list):
        sm = f"sm_{major}{minor}"
        raise UserError(
            f"this torch build has kernels for {' '.join(arch_list) or 'no GPU arch'} but the GPU "
            f"is {sm}; install a torch/CUDA build that lists {sm} (CUDA 13 dropped sm_70: use "
            "a CUDA 12.x image on V100)"
        )


def resolve_precision(requested: str, capability: tuple[int, int] | None) -> str:
    """`--precision` on a GPU of compute `capability` (None: the CPU), "auto" resolved:
    bf16 where the GPU computes it natively, fp16 with a GradScaler on older GPUs (V100,
    T4), fp32 on the CPU."""
    if capability is None:
        if requested == "fp16":
            raise UserError("--precision fp16 needs a GPU; use fp32 or bf16 on CPU")
        return "fp32" if requested == "auto" else requested
    native_bf16 = tuple(capability) >= NATIVE_BF16_CAPABILITY
    if requested == "bf16" and not native_bf16:
        sm = f"sm_{capability[0]}{capability[1]}"
        raise UserError(
            f"--precision bf16: this GPU ({sm}) has no native bf16 (cuDNN has no bf16 "
            "convolutions before sm_80); use --precision fp16 or auto"
        )
    if requested == "auto":
        return "bf16" if native_bf16 else "fp16"
    return requested


def nvidia_devices(root: Path = Path("/")) -> list[str]:
    """What shows NVIDIA GPUs under `root` (device nodes, the driver's GPU list)."""
    return sorted(str(path) for pattern in NVIDIA_DEVICE_GLOBS for path in root.glob(pattern))


def _cuda_failure() -> str:
    """Why CUDA does not start, in torch's words (its initialisation error)."""
    try:
        torch.cuda.init()
    except Exception as error:  # RuntimeError from the driver, AssertionError on CPU builds
        return (str(error).strip().splitlines() or [type(error).__name__])[0][:300]
    return "torch sees no usable GPU"


def refuse_cpu_on_a_gpu_machine(root: Path = Path("/")) -> None:
    """UserError when this machine has NVIDIA GPUs but CUDA does not start, unless
    CUDA_VISIBLE_DEVICES hides them on purpose (how to run on the CPU of a GPU box)."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", "unset").strip().lower() in HIDDEN_GPU_VALUES:
        return
    found = nvidia_devices(root)
    if not found:
        return
    raise UserError(
        f"NVIDIA GPUs are present ({', '.join(found[:2])}) but CUDA does not start: "
        f"{_cuda_failure()}; expected a working GPU for torch CUDA {torch.version.cuda}: "
        "check `nvidia-smi` on the box (a driver older than the image's CUDA; "
        "nvidia-fabricmanager stopped on NVSwitch boxes: error 802) and that the container "
        "runs with --gpus all, or set CUDA_VISIBLE_DEVICES= to train on the CPU on purpose"
    )


def choose_device(precision: str) -> DeviceChoice:
    """Resolve `--precision` on the best available device; print the hardware line."""
    if not torch.cuda.is_available():
        refuse_cpu_on_a_gpu_machine()
        resolved = resolve_precision(precision, None)
        description = f"CPU ({torch.get_num_threads()} threads), torch {torch.__version__}"
        return DeviceChoice(torch.device("cpu"), resolved, description)

    device = torch.device("cuda", torch.cuda.current_device())
    capability = torch.cuda.get_device_capability(device)
    description = (
        f"GPU {torch.cuda.get_device_name(device)}, compute capability "
        f"{capability[0]}.{capability[1]}, driver {_driver_version()}, "
        f"CUDA {torch.version.cuda}, torch {torch.__version__}"
    )
    print(description, flush=True)
    check_arch_supported(capability, torch.cuda.get_arch_list())
    resolved = resolve_precision(precision, capability)
    # TF32 matmuls/convs for whatever still runs in fp32 (Ampere and newer).
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    # cuDNN times its algorithms per shape and keeps the fastest: not bitwise from one
    # run to the next; `use_deterministic_kernels` (--deterministic) turns it off.
    torch.backends.cudnn.benchmark = True
    return DeviceChoice(device, resolved, description)


def use_deterministic_kernels() -> None:
    """`--deterministic`: the same kernels, and the same result, every run.

    cuDNN's autotuner off and its deterministic algorithms on, cuBLAS's fixed
    workspace (the variable must be set before cuBLAS's first call, which comes later,
    at the first step), and torch's deterministic mode, which raises on an op that has
    no deterministic kernel instead of running it silently. Costs speed on a GPU.
    """
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.use_deterministic_algorithms(True)
