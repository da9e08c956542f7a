"""The one VM catalog for both clouds: sizes, GPUs, memory, prices and regions.

The Pulumi program validates `vmSize` against it and exports `hourlyPriceUsd` from it;
`fab plan` turns its GPU table and prices into time and cost estimates. Plain data and
the standard library only, so both can import it without pulling in a cloud SDK.

Prices are public pay-as-you-go Linux list prices in `price_region`, read from
`price_source` on `price_date`; spot prices move hourly, so `spot_usd_per_hour` is a
typical value (None where we have no trustworthy figure). A current size's prices are
not written here: they come from each cloud's dated price snapshot (`stack.prices`,
refreshed by `make prices`), where a size no offline reference prices has none
(`unpriced`: a stack cannot run on it until one is read). Nor are the regions that sell
a size: `VmSize.regions` reads the dated snapshot of each cloud's own reference
(`stack.offerings`, refreshed by `python -m stack.refresh_offerings`); a size that
snapshot never asked about has `regions_known` False.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Literal

from stack import offerings, prices

Cloud = Literal["azure", "aws"]
CLOUDS: tuple[str, ...] = ("azure", "aws")
_CLOUD_TITLES = {"azure": "Azure", "aws": "AWS"}

# When and where the retired sizes' last list prices below were read.
RETIRED_PRICE_DATE = "2025-07-01"
RETIRED_PRICE_SOURCE = "the clouds' public price pages, read by hand before the retirement"


# How the GPUs of a multi-GPU box reach each other (what DDP's all-reduce runs over);
# `ops.plan.throughput` holds the bandwidth each one means.
GPU_LINKS = ("PCIe 3.0", "PCIe 4.0", "NVLink 2", "NVLink 3", "NVLink 4 bridge", "NVLink 4")


# The oldest GPU the open-source NVIDIA kernel module drives (Turing): a box below it
# boots another image with the proprietary driver (pulumi/infra/aws/training_box.py),
# and CUDA 13 dropped Volta, so the two kinds never share an image or a fallback list.
OSS_DRIVER_MIN_COMPUTE_CAPABILITY = (7, 5)
# Azure sizes Microsoft lists with Trusted Launch (Gen2 sizes of NCasT4_v3, NC A100 v4 and
# NCads H100 v5: https://learn.microsoft.com/azure/virtual-machines/trusted-launch);
# a size added to the catalog boots the standard way until it is added here.
TRUSTED_LAUNCH_SIZES = (
    "Standard_NC4as_T4_v3",
    "Standard_NC8as_T4_v3",
    "Standard_NC16as_T4_v3",
    "Standard_NC64as_T4_v3",
    "Standard_NC24ads_A100_v4",
    "Standard_NC48ads_A100_v4",
    "Standard_NC96ads_A100_v4",
    "Standard_NC40ads_H100_v5",
    "Standard_NC80adis_H100_v5",
)


class CatalogError(ValueError):
    """A size the catalog does not know, or one the cloud has retired."""


@dataclass(frozen=True)
class GpuSpec:
    """Peak dense (no sparsity) tensor throughput of one GPU, from the vendor datasheet."""

    model: str
    memory_gib: int
    fp32_tflops: float
    fp16_tflops: float
    bf16_tflops: float  # 0 when the GPU has no bf16 support
    compute_capability: str
    memory_tb_s: float  # memory bandwidth, TB/s: a small model's step is partly bound by it


@dataclass(frozen=True)
class VmSize:
    """One VM size of one cloud."""

    name: str
    cloud: Cloud
    gpu_model: str  # a key of GPUS
    gpu_count: int
    gpu_memory_gib: int  # per GPU
    vcpus: int
    ram_gib: int
    # Unset (price_region None), the prices, their source and date are the cloud's price
    # snapshot's; its on-demand price stays None where no reference prices the size.
    on_demand_usd_per_hour: float | None = None
    spot_usd_per_hour: float | None = None
    price_region: str = None  # type: ignore[assignment]
    regions: tuple[str, ...] = None  # type: ignore[assignment]  # None: filled in below
    """Regions selling this size; unset, the cloud's offerings snapshot (`stack.offerings`)."""
    price_date: str = RETIRED_PRICE_DATE
    price_source: str = RETIRED_PRICE_SOURCE
    status: Literal["available", "retired"] = "available"
    retired_on: str | None = None
    replacement: str | None = None
    gpu_link: str | None = None  # one of GPU_LINKS on a multi-GPU size, else None
    fabric: Literal["ethernet", "infiniband", "efa"] = "ethernet"
    """What links boxes of this size besides their Ethernet: InfiniBand (Azure ND), EFA
    (AWS p4d/p5). How a run uses it: `ops.run.distributed`."""
    regions_known: bool = field(init=False)
    """Whether `regions` is a reference's answer: given, none for a retired size, or the
    offerings snapshot's for a size it lists; a size the snapshot never asked about is
    unknown there, not unsold."""

    def __post_init__(self) -> None:
        if (self.gpu_count > 1) != (self.gpu_link is not None) or self.gpu_link not in (
            None,
            *GPU_LINKS,
        ):
            raise ValueError(f"{self.name}: a multi-GPU size needs a gpu_link of {GPU_LINKS}")
        if self.cloud not in CLOUDS:
            raise ValueError(f"{self.name}: cloud {self.cloud!r} is not one of {CLOUDS}")
        if self.gpu_model not in GPUS:
            raise ValueError(f"{self.name}: GPU {self.gpu_model!r} is missing from GPUS")
        if (self.status == "retired") != (self.retired_on is not None):
            raise ValueError(f"{self.name}: a retired size needs retired_on, only it")
        if self.status == "retired" and not self.replacement:
            raise ValueError(f"{self.name}: a retired size needs a replacement")
        if self.price_region is None:
            self._price_from_snapshot()
        sold = offerings.of(self.cloud)
        # frozen: set once, here
        known = self.regions is not None or self.status == "retired" or sold.lists(self.name)
        object.__setattr__(self, "regions_known", known)
        if self.regions is None:
            object.__setattr__(self, "regions", sold.regions_of(self.name))

    def _price_from_snapshot(self) -> None:
        price_list = prices.of(self.cloud)
        if self.name not in price_list.usd_per_hour:
            raise ValueError(f"{self.name}: no price in stack/{prices.PRICES_FILE}; add it there")
        on_demand, spot = price_list.usd_per_hour[self.name]
        source, date = price_list.reference_of(self.name)
        for name, value in (
            ("on_demand_usd_per_hour", on_demand),
            ("spot_usd_per_hour", spot),
            ("price_region", price_list.region),
            ("price_date", date),
            ("price_source", source),
        ):
            object.__setattr__(self, name, value)  # frozen: set once, here

    @property
    def gpu(self) -> GpuSpec:
        return GPUS[self.gpu_model]

    @property
    def unpriced(self) -> str | None:
        """Why the size has no hourly price (where its price was looked for); None when
        it has one. Nothing that bills can be priced without it: `hourly_price_usd`
        refuses, `fab plan` shows hours only, a stack is refused (stack/cloud_limits.py)."""
        if self.on_demand_usd_per_hour is not None:
            return None
        return f"{self.name}: no on-demand price ({self.price_date}: {self.price_source})"

    @property
    def driver_class(self) -> str:
        """ "open" (the open-source kernel module's GPUs) or "proprietary" (older ones)."""
        major, minor = (int(part) for part in self.gpu.compute_capability.split("."))
        return "open" if (major, minor) >= OSS_DRIVER_MIN_COMPUTE_CAPABILITY else "proprietary"

    @property
    def security_type(self) -> str:
        """Azure's security type a box of this size gets: "TrustedLaunch" or "Standard"."""
        return "TrustedLaunch" if self.name in TRUSTED_LAUNCH_SIZES else "Standard"

    def hourly_price_usd(self, spot: bool) -> float:
        """What one box costs per hour; spot without a known spot price is billed at most
        the on-demand price (max price -1 on Azure, on-demand cap on AWS). CatalogError
        for an unpriced size: no figure is ever made up."""
        if spot and self.spot_usd_per_hour is not None:
            return self.spot_usd_per_hour
        if self.on_demand_usd_per_hour is None:
            raise CatalogError(str(self.unpriced))
        return self.on_demand_usd_per_hour


GPUS: dict[str, GpuSpec] = {
    g.model: g
    for g in (
        # T4 and V100 have no bf16; their fp16 figure is the tensor-core peak. Memory
        # bandwidth: A100 80GB as the PCIe card the catalog's sizes carry (SXM: 2.04).
        GpuSpec("T4", 16, 8.1, 65.0, 0.0, "7.5", 0.32),
        GpuSpec("V100 16GB", 16, 15.7, 125.0, 0.0, "7.0", 0.9),
        GpuSpec("A10G", 24, 31.2, 70.0, 70.0, "8.6", 0.6),
        GpuSpec("L4", 24, 30.3, 121.0, 121.0, "8.9", 0.3),
        GpuSpec("L40S", 48, 91.6, 362.0, 362.0, "8.9", 0.864),
        GpuSpec("A100 40GB", 40, 19.5, 312.0, 312.0, "8.0", 1.555),
        GpuSpec("A100 80GB", 80, 19.5, 312.0, 312.0, "8.0", 1.935),
        GpuSpec("H100 80GB", 80, 67.0, 989.0, 989.0, "9.0", 3.35),  # SXM5
        GpuSpec("H100 94GB", 94, 60.0, 835.0, 835.0, "9.0", 3.9),  # H100 NVL (Azure NCads H100 v5)
        # H200 SXM: the H100 SXM's compute with 141 GB of HBM3e at 4.8 TB/s.
        GpuSpec("H200 141GB", 141, 67.0, 989.0, 989.0, "9.0", 4.8),
    )
}

# fmt: off
_AZ_RETIRED = "2025-09-30"  # NCv3 (V100) retirement, announced by Microsoft in 2023

_CATALOG: tuple[VmSize, ...] = (
    # Azure NCasT4_v3 — T4 16 GB.
    VmSize("Standard_NC4as_T4_v3", "azure", "T4", 1, 16, 4, 28),
    VmSize("Standard_NC8as_T4_v3", "azure", "T4", 1, 16, 8, 56),
    VmSize("Standard_NC16as_T4_v3", "azure", "T4", 1, 16, 16, 110),
    VmSize("Standard_NC64as_T4_v3", "azure", "T4", 4, 16, 64, 440, gpu_link="PCIe 3.0"),
    # Azure NC A100 v4 — A100 80 GB PCIe.
    VmSize("Standard_NC24ads_A100_v4", "azure", "A100 80GB", 1, 80, 24, 220),
    # PCIe cards: costed over PCIe 4.0, without the NVLink bridges some hosts may have.
    VmSize("Standard_NC48ads_A100_v4", "azure", "A100 80GB", 2, 80, 48, 440,
           gpu_link="PCIe 4.0"),
    VmSize("Standard_NC96ads_A100_v4", "azure", "A100 80GB", 4, 80, 96, 880,
           gpu_link="PCIe 4.0"),
    # Azure NCads H100 v5 — H100 NVL 94 GB.
    VmSize("Standard_NC40ads_H100_v5", "azure", "H100 94GB", 1, 94, 40, 320),
    VmSize("Standard_NC80adis_H100_v5", "azure", "H100 94GB", 2, 94, 80, 640,
           gpu_link="NVLink 4 bridge"),
    # Azure ND A100 v4 — 8x A100 40 GB SXM with NVLink and InfiniBand.
    VmSize("Standard_ND96asr_v4", "azure", "A100 40GB", 8, 40, 96, 900, gpu_link="NVLink 3",
           fabric="infiniband"),
    # Azure ND H100 v5 / ND H200 v5 — 8x H100 80 GB / H200 141 GB SXM, NVLink 4 and
    # InfiniBand (https://learn.microsoft.com/azure/virtual-machines/sizes/gpu-accelerated/
    # nd-h100-v5-series, nd-h200-v5-series).
    VmSize("Standard_ND96isr_H100_v5", "azure", "H100 80GB", 8, 80, 96, 1900,
           gpu_link="NVLink 4", fabric="infiniband"),
    VmSize("Standard_ND96isr_H200_v5", "azure", "H200 141GB", 8, 141, 96, 1850,
           gpu_link="NVLink 4", fabric="infiniband"),
    # Azure NCv3 — V100 16 GB; what the seeds recommend, retired by Azure: its last list
    # prices are kept here, the snapshot prices only what is sold.
    VmSize("Standard_NC6s_v3", "azure", "V100 16GB", 1, 16, 6, 112, 3.06, None, "eastus",
           status="retired", retired_on=_AZ_RETIRED, replacement="Standard_NC24ads_A100_v4"),
    VmSize("Standard_NC12s_v3", "azure", "V100 16GB", 2, 16, 12, 224, 6.12, None, "eastus",
           status="retired", retired_on=_AZ_RETIRED, replacement="Standard_NC24ads_A100_v4",
           gpu_link="PCIe 3.0"),
    VmSize("Standard_NC24s_v3", "azure", "V100 16GB", 4, 16, 24, 448, 12.24, None, "eastus",
           status="retired", retired_on=_AZ_RETIRED, replacement="Standard_NC48ads_A100_v4",
           gpu_link="PCIe 3.0"),
    # AWS P3 — V100 16 GB SXM2 (needs a CUDA 12.x image: CUDA 13 dropped Volta).
    VmSize("p3.2xlarge", "aws", "V100 16GB", 1, 16, 8, 61),
    VmSize("p3.8xlarge", "aws", "V100 16GB", 4, 16, 32, 244, gpu_link="NVLink 2"),
    VmSize("p3.16xlarge", "aws", "V100 16GB", 8, 16, 64, 488, gpu_link="NVLink 2"),
    # AWS P4d / P5 — A100 40 GB / H100 80 GB SXM, with EFA between boxes
    # (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html).
    VmSize("p4d.24xlarge", "aws", "A100 40GB", 8, 40, 96, 1152, gpu_link="NVLink 3",
           fabric="efa"),
    VmSize("p5.48xlarge", "aws", "H100 80GB", 8, 80, 192, 2048, gpu_link="NVLink 4",
           fabric="efa"),
    # One H100 of a P5 host: the cheapest H100 on AWS.
    VmSize("p5.4xlarge", "aws", "H100 80GB", 1, 80, 16, 256),
    # AWS P5e / P5en — 8x H200 141 GB SXM; P5en with Sapphire Rapids hosts and PCIe 5.
    VmSize("p5e.48xlarge", "aws", "H200 141GB", 8, 141, 192, 2048, gpu_link="NVLink 4",
           fabric="efa"),
    VmSize("p5en.48xlarge", "aws", "H200 141GB", 8, 141, 192, 2048, gpu_link="NVLink 4",
           fabric="efa"),
    # AWS G5 — A10G 24 GB; G6 — L4 24 GB.
    VmSize("g5.xlarge", "aws", "A10G", 1, 24, 4, 16),
    VmSize("g5.2xlarge", "aws", "A10G", 1, 24, 8, 32),
    VmSize("g5.4xlarge", "aws", "A10G", 1, 24, 16, 64),
    VmSize("g5.8xlarge", "aws", "A10G", 1, 24, 32, 128),
    VmSize("g5.12xlarge", "aws", "A10G", 4, 24, 48, 192, gpu_link="PCIe 4.0"),
    VmSize("g6.xlarge", "aws", "L4", 1, 24, 4, 16),
    VmSize("g6.2xlarge", "aws", "L4", 1, 24, 8, 32),
    VmSize("g6.4xlarge", "aws", "L4", 1, 24, 16, 64),
    VmSize("g6.12xlarge", "aws", "L4", 4, 24, 48, 192, gpu_link="PCIe 4.0"),
    # AWS G6e — L40S 48 GB (PCIe, no NVLink).
    VmSize("g6e.xlarge", "aws", "L40S", 1, 48, 4, 32),
    VmSize("g6e.2xlarge", "aws", "L40S", 1, 48, 8, 64),
    VmSize("g6e.12xlarge", "aws", "L40S", 4, 48, 48, 384, gpu_link="PCIe 4.0"),
)
# fmt: on

# The cheapest current GPU of each cloud: what a newcomer gets without choosing.
_DEFAULT_SIZES: dict[str, str] = {"azure": "Standard_NC4as_T4_v3", "aws": "g6.xlarge"}


def default_size(cloud: str) -> VmSize:
    """The size a stack gets when it sets no `vmSize`."""
    if cloud not in _DEFAULT_SIZES:
        raise CatalogError(f"cloud {cloud!r} is not one of {', '.join(CLOUDS)}")
    return lookup(_DEFAULT_SIZES[cloud], cloud)


def sizes(
    cloud: str | None = None, region: str | None = None, include_retired: bool = False
) -> tuple[VmSize, ...]:
    """Sizes filtered by cloud and region, cheapest first within each cloud."""
    rows = (
        s
        for s in _CATALOG
        if (cloud is None or s.cloud == cloud)
        and (region is None or region in s.regions)
        and (include_retired or s.status == "available")
    )
    return tuple(sorted(rows, key=_cheapest_first))


def _cheapest_first(size: VmSize) -> tuple[int, bool, float]:
    """Within a cloud by on-demand price; an unpriced size after every priced one."""
    price = size.on_demand_usd_per_hour
    return CLOUDS.index(size.cloud), price is None, price or 0.0


def lookup(name: str, cloud: str) -> VmSize:
    """The current size called `name` (case-insensitive, as both clouds treat it).

    Raises CatalogError naming the retirement and replacement for a retired size, the
    right cloud for a size of the other cloud, and close names for a typo.
    """
    if cloud not in CLOUDS:
        raise CatalogError(f"cloud {cloud!r} is not one of {', '.join(CLOUDS)}")
    by_name = {s.name.lower(): s for s in _CATALOG if s.cloud == cloud}
    size = by_name.get(name.strip().lower())
    if size is not None and size.status == "available":
        return size
    if size is not None:
        budget = _DEFAULT_SIZES[cloud]
        alternative = f" (or {budget} on a budget)" if budget != size.replacement else ""
        what = f"{size.name} ({size.gpu_count}x {size.gpu_model})"
        raise CatalogError(
            f"{what} was retired by {_CLOUD_TITLES[cloud]} on {size.retired_on}; "
            f"use {size.replacement} instead{alternative}"
        )
    other = [s for s in _CATALOG if s.cloud != cloud and s.name.lower() == name.strip().lower()]
    if other:
        raise CatalogError(
            f"{other[0].name} is an {other[0].cloud} size, not {cloud}; set cloud to "
            f"{other[0].cloud} or pick one of: {', '.join(s.name for s in sizes(cloud))}"
        )
    current = [s.name for s in sizes(cloud)]
    close = difflib.get_close_matches(name.strip().lower(), list(by_name), n=3, cutoff=0.6)
    hint = (
        f"did you mean {' or '.join(by_name[c].name for c in close)}?"
        if close
        else f"known {cloud} sizes: {', '.join(current)}"
    )
    raise CatalogError(f"unknown {cloud} VM size {name!r}; {hint}")
