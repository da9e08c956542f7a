"""Rewrite stack/offerings.json from the clouds' references: `python -m stack.refresh_offerings`.

- AWS: the per-region instance types of the installed cfn-lint
  (`data/schemas/extensions/aws_ec2_instance/instancetype_enum.json`, which cfn-lint
  generates from the AWS Price List), dated by its `schema_date`. Offline; upgrade
  cfn-lint (`pip install -U cfn-lint`, and its pin in pyproject.toml) for newer data.
  Only the `aws` partition: the program's ARNs are `arn:aws:...`, so China and
  GovCloud regions are left out.
- Azure: the Azure Retail Prices API (public, no account), every catalog size in every
  region: a Linux pay-as-you-go meter means the region sells the size, a Linux Spot
  meter that it sells it as spot. Dated the day of the refresh.

`--cloud aws|azure` refreshes one cloud and keeps the other's entry as it is.
`GLUCOSE_AZURE_PRICES_URL` (or `--azure-prices-url`) points the Azure half elsewhere.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from collections.abc import Iterable
from importlib.metadata import version
from pathlib import Path

from stack import azure_retail_prices, catalog
from stack.offerings import OFFERINGS_FILE, Offerings

HTTP_TIMEOUT_SECONDS = 30
# ~13 sizes x ~60 regions x a few meters each, 100 items a page: a few dozen pages.
MAX_AZURE_PAGES = 500
CFN_INSTANCE_TYPES = "data/schemas/extensions/aws_ec2_instance/instancetype_enum.json"
CFN_SCHEMA_VERSION = "data/schemas/version.json"
DEFAULT_OUT = Path(__file__).with_name(OFFERINGS_FILE)


class RefreshError(RuntimeError):
    """A reference could not be read, or did not answer as documented."""


def aws_offerings(names: Iterable[str]) -> Offerings:
    """Where each size in `names` is sold, per the installed cfn-lint's instance-type data."""
    import botocore.session
    import cfnlint

    root = Path(cfnlint.__file__).parent
    by_region = json.loads((root / CFN_INSTANCE_TYPES).read_text())
    schema_date = json.loads((root / CFN_SCHEMA_VERSION).read_text())["schema_date"][:10]
    session = botocore.session.get_session()
    commercial = [
        region
        for region in by_region
        if region not in ("description", "all")
        and session.get_partition_for_region(region) == "aws"
    ]
    return Offerings(
        cloud="aws",
        source=f"cfn-lint {version('cfn-lint')} instancetype_enum.json, from the AWS Price List",
        date=schema_date,
        regions={
            name: tuple(sorted(r for r in commercial if name in by_region[r]["enum"]))
            for name in names
        },
    )


def azure_offerings(
    names: Iterable[str], url: str = azure_retail_prices.URL, today: datetime.date | None = None
) -> Offerings:
    """Where each size in `names` is sold, on demand and as spot, per the Retail Prices API
    (`stack.azure_retail_prices`)."""
    names = list(names)
    try:
        items = azure_retail_prices.items(
            azure_retail_prices.vm_filter(names), url, HTTP_TIMEOUT_SECONDS, MAX_AZURE_PAGES
        )
    except azure_retail_prices.RetailPricesError as error:
        raise RefreshError(str(error)) from None
    wanted = {name.lower(): name for name in names}
    regions: dict[str, set[str]] = {name: set() for name in names}
    spot: dict[str, set[str]] = {name: set() for name in names}
    for item in items:
        name = wanted.get(str(item.get("armSkuName", "")).lower())
        region = item.get("armRegionName") or ""
        meter = f"{item.get('meterName', '')} {item.get('skuName', '')}"
        # Windows meters carry the licence; Low Priority is spot's retired predecessor.
        if name is None or not region or "Windows" in str(item.get("productName", "")):
            continue
        if "Low Priority" in meter:
            continue
        (spot if "Spot" in meter else regions)[name].add(region)
    return Offerings(
        cloud="azure",
        source=f"Azure Retail Prices API {azure_retail_prices.API_VERSION}",
        date=(today or datetime.datetime.now(datetime.timezone.utc).date()).isoformat(),
        regions={k: tuple(sorted(v)) for k, v in regions.items()},
        spot_regions={k: tuple(sorted(v)) for k, v in spot.items()},
    )


def refresh(cloud: str, out: Path, azure_url: str) -> dict[str, Offerings]:
    """Read `cloud`'s reference ("all" for both) and write the snapshot to `out`; the
    file is written only once every reference asked for has answered."""
    names = {c: [s.name for s in catalog.sizes(c)] for c in catalog.CLOUDS}
    fresh = {}
    if cloud in ("aws", "all"):
        fresh["aws"] = aws_offerings(names["aws"])
    if cloud in ("azure", "all"):
        fresh["azure"] = azure_offerings(names["azure"], azure_url)
    current = json.loads(out.read_text()) if out.exists() else {}
    snapshot = {c: Offerings.from_json(c, data) for c, data in current.items()} | fresh
    data = {c: snapshot[c].to_json() for c in sorted(snapshot)}
    out.write_text(json.dumps(data, indent=1) + "\n")
    return snapshot


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stack.refresh_offerings", description=__doc__)
    parser.add_argument("--cloud", choices=("all", "aws", "azure"), default="all")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument(
        "--azure-prices-url",
        default=os.environ.get(azure_retail_prices.URL_ENV) or azure_retail_prices.URL,
    )
    args = parser.parse_args(argv)
    try:
        snapshot = refresh(args.cloud, args.out, args.azure_prices_url)
    except RefreshError as error:
        print(f"refresh_offerings: {error}; {args.out} is unchanged", file=sys.stderr)
        return 1
    for offerings in snapshot.values():
        print(f"{offerings.cloud}: {offerings.label} -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
