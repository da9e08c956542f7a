"""Hourly list prices of the catalog's current sizes: a dated snapshot per cloud.

`stack/prices.json` holds, per cloud, the reference the prices were read from
(`source`), its date (`date`), the region priced (`region`), and for every current
catalog size its Linux pay-as-you-go price and a typical spot price per hour (null:
no trustworthy spot figure). A size priced from another reference than its cloud's
carries its own `source` and `date`; a size no reference prices offline has a null
on-demand price and a `source` that says where it was looked for. `make prices`
(`python -m ops.plan.refresh_prices`) rewrites it from the clouds' price APIs
(docs/costs.md); the catalog's `VmSize` prices, the Pulumi program's `hourlyPriceUsd`
and `fab plan` read it from here.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
from dataclasses import dataclass, field
from typing import Any

PRICES_FILE = "prices.json"


@dataclass(frozen=True)
class PriceList:
    """One cloud's prices in `region`, read from `source` on `date`."""

    cloud: str
    source: str
    date: str
    region: str
    usd_per_hour: dict[str, tuple[float | None, float | None]]
    """Size name -> (on-demand or None: no reference prices it, spot or None) USD per hour."""
    references: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Size name -> (source, date) of a size priced from its own reference, not `source`."""

    def reference_of(self, name: str) -> tuple[str, str]:
        """(source, date) of `name`'s prices: its own reference, else the list's."""
        return self.references.get(name, (self.source, self.date))

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "date": self.date,
            "region": self.region,
            "sizes": {name: self._size_json(name) for name in sorted(self.usd_per_hour)},
        }

    def _size_json(self, name: str) -> dict[str, Any]:
        on_demand, spot = self.usd_per_hour[name]
        row: dict[str, Any] = {"onDemandUsdPerHour": on_demand, "spotUsdPerHour": spot}
        if name in self.references:
            row["source"], row["date"] = self.references[name]
        return row

    @classmethod
    def from_json(cls, cloud: str, data: dict[str, Any]) -> PriceList:
        sizes = data["sizes"]
        return cls(
            cloud=cloud,
            source=data["source"],
            date=data["date"],
            region=data["region"],
            usd_per_hour={
                name: (price["onDemandUsdPerHour"], price["spotUsdPerHour"])
                for name, price in sizes.items()
            },
            references={
                name: (price["source"], price["date"])
                for name, price in sizes.items()
                if "source" in price
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
