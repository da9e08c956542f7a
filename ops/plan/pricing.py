"""Hourly VM prices: the catalog's dated snapshot, or live from each cloud's price API.

Live sources: the Azure Retail Prices API (public, no account) and, for AWS, the Price
List API (`pricing:GetProducts`) for on-demand plus EC2 spot price history, both
through boto3 with the user's credentials. Any failure — offline, no credentials, a
size the API does not list — falls back to the snapshot for the sizes affected and
says so through `warn`; a plan is never refused for want of a network.

Endpoints are parameters so tests can point them at local fakes on 127.0.0.1; boto3
also honours AWS_ENDPOINT_URL_PRICING / AWS_ENDPOINT_URL_EC2 on its own.
"""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import date, datetime, timezone

from stack import azure_retail_prices
from stack.catalog import VmSize

# The Price List API is served from a few regions only; us-east-1 answers for all.
AWS_PRICING_API_REGION = "us-east-1"
HTTP_TIMEOUT_SECONDS = 10.0
MAX_PAGES = 20  # the filtered queries fit in one or two pages; this only bounds a loop


@dataclass(frozen=True)
class HourlyPrice:
    """What one box of a size costs per hour in a region, and where the figure is from."""

    on_demand_usd_per_hour: float | None  # None: no reference prices it (the catalog's `unpriced`)
    spot_usd_per_hour: float | None  # spot moves hourly: always a volatile figure
    region: str
    source: str  # e.g. "snapshot 2025-07-01" or "live 2026-11-22"

    @property
    def live(self) -> bool:
        return self.source.startswith("live")


# A snapshot older than this is said to be stale where its prices are shown.
STALE_AFTER_MONTHS = 6


def months_between(earlier: date, later: date) -> int:
    """Whole calendar months from `earlier` to `later` (2025-07-01 to 2026-01-01: 6)."""
    months = (later.year - earlier.year) * 12 + later.month - earlier.month
    return months - (later.day < earlier.day)


def snapshot_age_warning(dates: Iterable[str], today: date) -> str | None:
    """One line when the oldest snapshot date priced is STALE_AFTER_MONTHS or more before
    `today` (ISO dates), with how to refresh it; None when it is fresh or none was used."""
    oldest = min(dates, default=None)
    if oldest is None:
        return None
    age = months_between(date.fromisoformat(oldest), today)
    if age < STALE_AFTER_MONTHS:
        return None
    return f"the price snapshot is from {oldest}, {age} months ago: make prices, or --live"


class PriceFetchError(RuntimeError):
    """A live price source could not be reached or did not answer as documented."""


def snapshot_price(size: VmSize) -> HourlyPrice:
    """The catalog's dated list price for a size, in the catalog's price region."""
    return HourlyPrice(
        size.on_demand_usd_per_hour,
        size.spot_usd_per_hour,
        size.price_region,
        f"snapshot {size.price_date}",
    )


def _today() -> str:
    return datetime.now(timezone.utc).date().isoformat()


def fetch_azure_prices(
    names: Iterable[str],
    region: str,
    url: str = azure_retail_prices.URL,
    timeout_s: float = HTTP_TIMEOUT_SECONDS,
) -> dict[str, HourlyPrice]:
    """Linux pay-as-you-go and spot prices per hour for VM sizes in one Azure region
    (`stack.azure_retail_prices`). Sizes the API does not list in the region are
    missing from the result.
    """
    names = list(names)
    try:
        items = azure_retail_prices.items(
            azure_retail_prices.vm_filter(names, region), url, timeout_s, MAX_PAGES
        )
    except azure_retail_prices.RetailPricesError as error:
        raise PriceFetchError(str(error)) from error
    try:
        return _azure_prices_from_items(items, names, region)
    except (KeyError, TypeError, ValueError) as e:
        raise PriceFetchError(f"Azure Retail Prices API: unexpected item ({e!r})") from e


def _azure_prices_from_items(
    items: list[dict], names: list[str], region: str
) -> dict[str, HourlyPrice]:
    on_demand: dict[str, tuple[str, float]] = {}
    spot: dict[str, tuple[str, float]] = {}
    wanted = {n.lower(): n for n in names}
    for item in items:
        name = wanted.get(str(item.get("armSkuName", "")).lower())
        meter = f"{item.get('meterName', '')} {item.get('skuName', '')}"
        # Windows meters carry the licence; Low Priority is the retired spot predecessor.
        if (
            name is None
            or "Windows" in str(item.get("productName", ""))
            or "Low Priority" in meter
            or item.get("unitOfMeasure") != "1 Hour"
        ):
            continue
        table = spot if "Spot" in meter else on_demand
        # Several rows for a meter differ in effectiveStartDate: the newest is in force.
        started = str(item.get("effectiveStartDate", ""))
        if name not in table or started > table[name][0]:
            table[name] = (started, float(item["retailPrice"]))
    return {
        name: HourlyPrice(price, spot.get(name, ("", None))[1], region, f"live {_today()}")
        for name, (_, price) in on_demand.items()
    }


def _boto_client(service: str, region: str, endpoint_url: str | None, timeout_s: float):
    import boto3  # lazily: a missing or slow boto3 must not break the Azure path
    from botocore.config import Config

    config = Config(connect_timeout=timeout_s, read_timeout=timeout_s, retries={"max_attempts": 1})
    # A fresh session each time: the default one caches credentials for the process.
    session = boto3.session.Session()
    return session.client(service, region_name=region, endpoint_url=endpoint_url, config=config)


def _aws_on_demand(client, name: str, region: str) -> float | None:
    filters = {
        "instanceType": name,
        "regionCode": region,
        "operatingSystem": "Linux",
        "tenancy": "Shared",
        "preInstalledSw": "NA",
        "capacitystatus": "Used",
    }
    response = client.get_products(
        ServiceCode="AmazonEC2",
        Filters=[{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in filters.items()],
        MaxResults=10,
    )
    for raw in response.get("PriceList", []):
        product = json.loads(raw) if isinstance(raw, str) else raw
        for term in product.get("terms", {}).get("OnDemand", {}).values():
            for dimension in term.get("priceDimensions", {}).values():
                if dimension.get("unit") == "Hrs":
                    return float(dimension["pricePerUnit"]["USD"])
    return None


def _aws_spot(client, names: list[str]) -> dict[str, float]:
    """Median over availability zones of each type's latest Linux spot price."""
    latest: dict[tuple[str, str], tuple[datetime, float]] = {}
    kwargs = {
        "InstanceTypes": names,
        "ProductDescriptions": ["Linux/UNIX"],
        "StartTime": datetime.now(timezone.utc),
    }
    for _ in range(MAX_PAGES):
        response = client.describe_spot_price_history(**kwargs)
        for entry in response.get("SpotPriceHistory", []):
            key = (entry["InstanceType"], entry.get("AvailabilityZone", ""))
            stamp = entry["Timestamp"]
            if key not in latest or stamp > latest[key][0]:
                latest[key] = (stamp, float(entry["SpotPrice"]))
        if not response.get("NextToken"):
            break
        kwargs["NextToken"] = response["NextToken"]
    by_type: dict[str, list[float]] = {}
    for (name, _), (_, price) in latest.items():
        by_type.setdefault(name, []).append(price)
    return {name: statistics.median(prices) for name, prices in by_type.items()}


def fetch_aws_prices(
    names: Iterable[str],
    region: str,
    pricing_endpoint_url: str | None = None,
    ec2_endpoint_url: str | None = None,
    timeout_s: float = HTTP_TIMEOUT_SECONDS,
    warn: Callable[[str], None] | None = None,
) -> dict[str, HourlyPrice]:
    """On-demand (Price List API) and spot (EC2 spot price history) prices per hour.

    https://docs.aws.amazon.com/aws-cost-management/latest/APIReference/API_pricing_GetProducts.html
    Needs AWS credentials (any identity allowed pricing:GetProducts and
    ec2:DescribeSpotPriceHistory). Sizes without an on-demand price are left out.
    """
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    names = list(names)
    try:
        pricing = _boto_client("pricing", AWS_PRICING_API_REGION, pricing_endpoint_url, timeout_s)
        on_demand = {n: _aws_on_demand(pricing, n, region) for n in names}
    except NoCredentialsError as e:
        raise PriceFetchError(
            "AWS Price List API needs AWS credentials; run `aws configure` or set AWS_PROFILE"
        ) from e
    except (BotoCoreError, ClientError, KeyError, ValueError) as e:
        raise PriceFetchError(f"AWS Price List API: {e}") from e
    try:
        ec2 = _boto_client("ec2", region, ec2_endpoint_url, timeout_s)
        spot: dict[str, float] = _aws_spot(ec2, names)
    except (BotoCoreError, ClientError, KeyError, ValueError) as e:
        # On-demand is what matters most: keep it, and let the caller fill spot in.
        if warn is not None:
            warn(f"live AWS spot prices unavailable (EC2 spot price history: {e})")
        spot = {}
    return {
        n: HourlyPrice(price, spot.get(n), region, f"live {_today()}")
        for n, price in on_demand.items()
        if price is not None
    }


@dataclass(frozen=True)
class PriceEndpoints:
    """Where live prices come from; None means the cloud's public endpoint."""

    azure_url: str = azure_retail_prices.URL
    aws_pricing_url: str | None = None
    aws_ec2_url: str | None = None
    timeout_s: float = HTTP_TIMEOUT_SECONDS

    @classmethod
    def from_env(cls) -> PriceEndpoints:
        """Public endpoints unless overridden (boto3 reads AWS_ENDPOINT_URL_* itself)."""
        return cls(azure_url=os.environ.get(azure_retail_prices.URL_ENV, azure_retail_prices.URL))


def _with_snapshot_spot(live: HourlyPrice, size: VmSize) -> HourlyPrice:
    if live.spot_usd_per_hour is not None or size.spot_usd_per_hour is None:
        return live
    return replace(
        live,
        spot_usd_per_hour=size.spot_usd_per_hour,
        source=f"{live.source}, spot snapshot {size.price_date}",
    )


def live_prices(
    sizes: Iterable[VmSize],
    region: str | None,
    warn: Callable[[str], None],
    endpoints: PriceEndpoints | None = None,
) -> dict[str, HourlyPrice]:
    """Live prices by size name; the snapshot, with a warning, wherever live fails.

    region None asks each size's catalog price region, so live and snapshot compare.
    A live on-demand price without a live spot price keeps the snapshot's spot figure.
    """
    endpoints = endpoints or PriceEndpoints.from_env()
    result: dict[str, HourlyPrice] = {}
    groups: dict[tuple[str, str], list[VmSize]] = {}
    for size in sizes:
        groups.setdefault((size.cloud, region or size.price_region), []).append(size)
    for (cloud, where), group in sorted(groups.items()):
        names = [s.name for s in group]
        try:
            if cloud == "azure":
                fetched = fetch_azure_prices(names, where, endpoints.azure_url, endpoints.timeout_s)
            else:
                fetched = fetch_aws_prices(
                    names,
                    where,
                    endpoints.aws_pricing_url,
                    endpoints.aws_ec2_url,
                    endpoints.timeout_s,
                    warn,
                )
        except PriceFetchError as e:
            warn(f"live {cloud} prices unavailable ({e}); using the catalog snapshot instead")
            fetched = {}
        missing = [s.name for s in group if s.name not in fetched]
        if fetched and missing:
            warn(f"no live {cloud} price in {where} for {', '.join(missing)}; using the snapshot")
        for size in group:
            live = fetched.get(size.name)
            result[size.name] = _with_snapshot_spot(live, size) if live else snapshot_price(size)
    return result
