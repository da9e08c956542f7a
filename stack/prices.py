"""Hourly list prices of the catalog's current sizes: a dated snapshot per cloud.

`stack/prices.json` holds, per cloud, the reference the prices were read from
(`source`), its date (`date`), the region priced (`region`), and for every current
catalog size its Linux pay-as-you-go price and a typical spot price per hour (null:
no trustworthy spot figure). `make prices` (`python -m ops.plan.refresh_prices`)
rewrites it from the clouds' price APIs (docs/costs.md); the catalog's `VmSize` prices,
the Pulumi program's `hourlyPriceUsd` and `fab plan` read it from here.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
from dataclasses import dataclass
from typing import Any

PRICES_FILE = "prices.json"


@dataclass(frozen=True)
class PriceList:
    """One cloud's prices in `region`, read from `source` on `date`."""

    cloud: str
    source: str
    date: str
    region: str
    usd_per_hour: dict[str, tuple[float, float | None]]
    """Size name -> (on-demand, spot or None) USD per hour."""

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "date": self.date,
            "region": self.region,
            "sizes": {
                name: {"onDemandUsdPerHour": on_demand, "spotUsdPerHour": spot}
                for name, (on_demand, spot) in sorted(self.usd_per_hour.items())
            },
        }

    @classmethod
    def from_json(cls, cloud: str, data: dict[str, Any]) -> PriceList:
        return cls(
            cloud=cloud,
            source=data["source"],
            date=data["date"],
            region=data["region"],
            usd_per_hour={
                name: (price["onDemandUsdPerHour"], price["spotUsdPerHour"])
                for name, price in data["sizes"].items()
            },
        )


def parse(text: str) -> dict[str, PriceList]:
    """Every cloud's price list from the text of a prices.json."""
    return {cloud: PriceList.from_json(cloud, data) for cloud, data in json.loads(text).items()}


def dump(price_lists: dict[str, PriceList]) -> str:
    """The text of a prices.json holding `price_lists`, clouds in name order."""
    data = {cloud: price_lists[cloud].to_json() for cloud in sorted(price_lists)}
    return json.dumps(data, indent=1) + "\n"


@functools.cache
def snapshot() -> dict[str, PriceList]:
    """Every cloud's prices, as stored in the package's prices.json."""
    return parse(importlib.resources.files("stack").joinpath(PRICES_FILE).read_text())


def of(cloud: str) -> PriceList:
    return snapshot()[cloud]
