"""Which regions sell which VM sizes: a dated snapshot of each cloud's own reference.

`stack/offerings.json` holds, per cloud, the reference it was read from (`source`),
the date of that reference (`date`), and for every catalog size the regions selling it
(`regions`; `spotRegions` too where the source says where spot capacity is sold).
`python -m stack.refresh_offerings` rewrites it (docs/cloud-references.md): AWS from the
per-region instance types cfn-lint ships (derived from the AWS Price List), Azure from
the public Azure Retail Prices API. The catalog's `VmSize.regions`, config validation
(size x region, before any resource) and `fab plan`'s footer read it from here.

A snapshot says what the cloud sells in a region, not what a subscription may use
there (restrictions, quota): `fab preflight` asks the account for that.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
from dataclasses import dataclass
from typing import Any

OFFERINGS_FILE = "offerings.json"


@dataclass(frozen=True)
class Offerings:
    """One cloud's snapshot: where each size is sold, according to `source` on `date`."""

    cloud: str
    source: str
    date: str
    regions: dict[str, tuple[str, ...]]
    """Size name -> regions selling it on demand; a size the source was not asked about
    is absent (unknown, not unsold: `lists`)."""
    spot_regions: dict[str, tuple[str, ...]] | None = None
    """Size name -> regions selling it as spot; None when the source does not say."""

    def regions_of(self, size: str) -> tuple[str, ...]:
        return self.regions.get(size, ())

    def lists(self, size: str) -> bool:
        """Whether the snapshot says where `size` is sold (even nowhere)."""
        return size in self.regions

    def sells_spot(self, size: str, region: str) -> bool | None:
        """Whether `region` sells `size` as spot; None when the snapshot cannot say."""
        if self.spot_regions is None:
            return None
        return region in self.spot_regions.get(size, ())

    @property
    def label(self) -> str:
        """e.g. "2026-10-20 (cfn-lint 1.58.0 ...)": what `fab plan` prints."""
        return f"{self.date} ({self.source})"

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "source": self.source,
            "date": self.date,
            "regions": {k: sorted(v) for k, v in sorted(self.regions.items())},
        }
        if self.spot_regions is not None:
            data["spotRegions"] = {k: sorted(v) for k, v in sorted(self.spot_regions.items())}
        return data

    @classmethod
    def from_json(cls, cloud: str, data: dict[str, Any]) -> Offerings:
        spot = data.get("spotRegions")
        return cls(
            cloud=cloud,
            source=data["source"],
            date=data["date"],
            regions={k: tuple(v) for k, v in data["regions"].items()},
            spot_regions=None if spot is None else {k: tuple(v) for k, v in spot.items()},
        )


@functools.cache
def snapshot() -> dict[str, Offerings]:
    """Every cloud's offerings, as stored in the package's offerings.json."""
    text = importlib.resources.files("stack").joinpath(OFFERINGS_FILE).read_text()
    return {cloud: Offerings.from_json(cloud, data) for cloud, data in json.loads(text).items()}


def of(cloud: str) -> Offerings:
    return snapshot()[cloud]
