"""Rewrite stack/prices.json from the clouds' price APIs: `make prices`.

`python -m ops.plan.refresh_prices [--cloud all|azure|aws] [--out PATH]` asks, for
every current catalog size in the region its cloud's snapshot prices:

- Azure: the Azure Retail Prices API (public, no account): Linux pay-as-you-go and
  Spot meters.
- AWS: the Price List API (`pricing:GetProducts`) for on-demand and the EC2 spot price
  history (median over zones) for spot, with your AWS credentials.

Each cloud refreshed is dated the day of the refresh, with its source. The file is
written only once every cloud asked for has priced every current size; otherwise one
line says what failed and the file is unchanged. `GLUCOSE_AZURE_PRICES_URL` and boto3's
`AWS_ENDPOINT_URL_PRICING` / `AWS_ENDPOINT_URL_EC2` point it elsewhere (the tests).
"""

from __future__ import annotations

import argparse
import sys
from datetime import date, datetime, timezone
from pathlib import Path

from ops.plan.pricing import (
    PriceEndpoints,
    PriceFetchError,
    fetch_aws_prices,
    fetch_azure_prices,
)
from stack import azure_retail_prices, catalog, prices

DEFAULT_OUT = Path(prices.__file__).with_name(prices.PRICES_FILE)
SOURCES = {
    "azure": f"Azure Retail Prices API {azure_retail_prices.API_VERSION}",
    "aws": "AWS Price List API (GetProducts) and EC2 spot price history",
}


def _strict(message: str) -> None:
    """A missing half of a snapshot is a failed refresh, not a warning."""
    raise PriceFetchError(message)


def _never_priced(price_list: prices.PriceList, name: str) -> bool:
    return name in price_list.usd_per_hour and price_list.usd_per_hour[name][0] is None


def fresh_price_list(
    cloud: str, names: list[str], current: prices.PriceList, endpoints: PriceEndpoints, today: date
) -> prices.PriceList:
    """`cloud`'s prices of `names` in `current`'s region from its API; PriceFetchError
    when it cannot be asked or leaves a size unpriced that `current` prices. A size no
    reference priced before and the API does not price either keeps its row as it is
    (no price, and where it was looked for): a refresh never makes one up."""
    region = current.region
    if cloud == "azure":
        fetched = fetch_azure_prices(names, region, endpoints.azure_url, endpoints.timeout_s)
    else:
        fetched = fetch_aws_prices(
            names, region, endpoints.aws_pricing_url, endpoints.aws_ec2_url,
            endpoints.timeout_s, warn=_strict,
        )  # fmt: skip
    unpriced = [name for name in names if name not in fetched and _never_priced(current, name)]
    missing = [name for name in names if name not in fetched and name not in unpriced]
    if missing:
        raise PriceFetchError(f"no {cloud} price in {region} for {', '.join(missing)}")
    return prices.PriceList(
        cloud=cloud,
        source=SOURCES[cloud],
        date=today.isoformat(),
        region=region,
        usd_per_hour={
            **{name: current.usd_per_hour[name] for name in unpriced},
            **{
                name: (price.on_demand_usd_per_hour, price.spot_usd_per_hour)
                for name, price in fetched.items()
            },
        },
        references={name: current.reference_of(name) for name in unpriced},
    )


def refresh(
    clouds: list[str], out: Path, endpoints: PriceEndpoints, today: date
) -> dict[str, prices.PriceList]:
    """Ask each cloud of `clouds` for its current sizes' prices, in the region `out`
    prices it in, and write `out` (the other clouds kept as they are)."""
    current = prices.parse(out.read_text())
    fresh = {
        cloud: fresh_price_list(
            cloud, [size.name for size in catalog.sizes(cloud)], current[cloud], endpoints, today
        )
        for cloud in clouds
    }
    out.write_text(prices.dump(current | fresh))
    return fresh


def _shown(path: Path) -> str:
    """The path as typed, or relative to here when under it (the default is absolute)."""
    return str(path.relative_to(Path.cwd())) if path.is_relative_to(Path.cwd()) else str(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ops.plan.refresh_prices",
        description="Rewrite stack/prices.json from the clouds' price APIs (needs the internet).",
    )
    parser.add_argument("--cloud", choices=("all", *catalog.CLOUDS), default="all")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    clouds = list(catalog.CLOUDS) if args.cloud == "all" else [args.cloud]
    today = datetime.now(timezone.utc).date()
    try:
        fresh = refresh(clouds, args.out, PriceEndpoints.from_env(), today)
    except PriceFetchError as error:
        print(
            f"refresh_prices: {error}; {_shown(args.out)} is unchanged (it needs the internet, "
            "and AWS credentials for aws; --cloud azure, or make prices CLOUD=azure: Azure alone)",
            file=sys.stderr,
        )
        return 1
    for price_list in fresh.values():
        print(f"{price_list.cloud}: {price_list.date} ({price_list.source}) -> {_shown(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
