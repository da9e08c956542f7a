"""Pick the device and the precision, and say what hardware the run is on.

On a GPU it prints name, compute capability, driver and CUDA versions before any
work, and refuses to start when this torch build has no kernels for the GPU's
architecture (e.g. a CUDA 13 build on a V100, sm_70): otherwise the first kernel
launch fails deep inside the first step with "no kernel image is available".
"""

from __future__ import annotations

import contextlib
import re
import subprocess
from dataclasses import dataclass

import torch

from trainer.config import UserError

PRECISION_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
NVIDIA_SMI_TIMEOUT_SECONDS = 10


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

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.precision == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)


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


def choose_device(precision: str) -> DeviceChoice:
    """Resolve `--precision` on the best available device; print the hardware line."""
    if not torch.cuda.is_available():
        if precision == "fp16":
            raise UserError("--precision fp16 needs a GPU; use fp32 or bf16 on CPU")
        resolved = "fp32" if precision == "auto" else precision
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
    has_bf16 = torch.cuda.is_bf16_supported()
    if precision == "bf16" and not has_bf16:
        raise UserError(
            f"--precision bf16: {torch.cuda.get_device_name(device)} lacks bf16; use fp16"
        )
    resolved = ("bf16" if has_bf16 else "fp16") if precision == "auto" else precision
    # TF32 matmuls/convs for whatever still runs in fp32 (Ampere and newer).
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = True
    return DeviceChoice(device, resolved, description)
