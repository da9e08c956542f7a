"""ops.plan.pricing against local fakes of the Azure Retail Prices API and the AWS Price List
and EC2 spot price history APIs on 127.0.0.1, and the snapshot fallback when offline."""

import json
import os
import subprocess
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from ops.plan import pricing
from stack import catalog
from tests.paths import REPO

AZURE_ITEMS = [
    # Linux pay-as-you-go, then an older row for the same meter that must lose.
    {"armSkuName": "Standard_NC4as_T4_v3", "meterName": "NC4as T4 v3", "skuName": "NC4as T4 v3",
     "productName": "Virtual Machines NCasT4_v3 Series", "unitOfMeasure": "1 Hour",
     "retailPrice": 0.6, "effectiveStartDate": "2026-01-01T00:00:00Z"},
    {"armSkuName": "Standard_NC4as_T4_v3", "meterName": "NC4as T4 v3", "skuName": "NC4as T4 v3",
     "productName": "Virtual Machines NCasT4_v3 Series", "unitOfMeasure": "1 Hour",
     "retailPrice": 0.5, "effectiveStartDate": "2024-01-01T00:00:00Z"},
    {"armSkuName": "Standard_NC4as_T4_v3", "meterName": "NC4as T4 v3 Spot",
     "skuName": "NC4as T4 v3 Spot", "productName": "Virtual Machines NCasT4_v3 Series",
     "unitOfMeasure": "1 Hour", "retailPrice": 0.2, "effectiveStartDate": "2026-01-01T00:00:00Z"},
    # Windows licence and the old Low Priority meter: both must be ignored.
    {"armSkuName": "Standard_NC4as_T4_v3", "meterName": "NC4as T4 v3", "skuName": "NC4as T4 v3",
     "productName": "Virtual Machines NCasT4_v3 Series Windows", "unitOfMeasure": "1 Hour",
     "retailPrice": 9.0, "effectiveStartDate": "2026-01-01T00:00:00Z"},
    {"armSkuName": "Standard_NC4as_T4_v3", "meterName": "NC4as T4 v3 Low Priority",
     "skuName": "NC4as T4 v3 Low Priority", "productName": "Virtual Machines NCasT4_v3 Series",
     "unitOfMeasure": "1 Hour", "retailPrice": 0.01, "effectiveStartDate": "2026-01-01T00:00:00Z"},
    {"armSkuName": "Standard_NC24ads_A100_v4", "meterName": "NC24ads A100 v4",
     "skuName": "NC24ads A100 v4", "productName": "Virtual Machines NCads A100 v4 Series",
     "unitOfMeasure": "1 Hour", "retailPrice": 3.9, "effectiveStartDate": "2026-01-01T00:00:00Z"},
]  # fmt: skip
AWS_ON_DEMAND_USD = {"g5.xlarge": "1.1000000000", "p3.2xlarge": "3.2000000000"}
AWS_SPOT_USD = {"g5.xlarge": {"us-east-1a": "0.41", "us-east-1b": "0.45", "us-east-1c": "0.50"}}


def _aws_product(instance_type: str, usd: str) -> str:
    """One PriceList entry in the Price List API's shape (it is a JSON string)."""
    return json.dumps(
        {
            "product": {
                "productFamily": "Compute Instance",
                "attributes": {
                    "instanceType": instance_type,
                    "regionCode": "us-east-1",
                    "operatingSystem": "Linux",
                },
            },
            "serviceCode": "AmazonEC2",
            "terms": {
                "OnDemand": {
                    "SKU.TERM": {
                        "priceDimensions": {
                            "SKU.TERM.DIM": {"unit": "Hrs", "pricePerUnit": {"USD": usd}}
                        }
                    }
                }
            },
        }
    )


def _spot_xml(types: list[str]) -> bytes:
    items = "".join(
        f"<item><availabilityZone>{zone}</availabilityZone><instanceType>{t}</instanceType>"
        f"<productDescription>Linux/UNIX</productDescription><spotPrice>{usd}</spotPrice>"
        f"<timestamp>2026-11-22T02:00:00.000Z</timestamp></item>"
        for t in types
        for zone, usd in AWS_SPOT_USD.get(t, {}).items()
    )
    # An older, higher price in one zone: only each zone's newest price may count.
    items += (
        "<item><availabilityZone>us-east-1a</availabilityZone><instanceType>g5.xlarge"
        "</instanceType><productDescription>Linux/UNIX</productDescription><spotPrice>9.99"
        "</spotPrice><timestamp>2026-11-21T02:00:00.000Z</timestamp></item>"
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?><DescribeSpotPriceHistoryResponse '
        'xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>r1</requestId>'
        f"<spotPriceHistorySet>{items}</spotPriceHistorySet><nextToken/>"
        "</DescribeSpotPriceHistoryResponse>"
    ).encode()


class _FakePriceApis(BaseHTTPRequestHandler):
    """Azure Retail Prices (GET, two pages), AWS GetProducts and DescribeSpotPriceHistory."""

    def log_message(self, *args):  # keep pytest output clean
        pass

    def _send(self, body: bytes, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
        self.server.azure_filters.append(query.get("$filter", [""])[0])
        skip = int(query.get("$skip", ["0"])[0])
        page = {"BillingCurrency": "USD", "Items": AZURE_ITEMS[skip : skip + 3], "Count": 3}
        host, port = self.server.server_address
        more = skip + 3 < len(AZURE_ITEMS)
        page["NextPageLink"] = (
            f"http://{host}:{port}/api/retail/prices?$skip={skip + 3}" if more else None
        )
        self._send(json.dumps(page).encode(), "application/json")

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.headers.get("X-Amz-Target") == "AWSPriceListService.GetProducts":
            filters = {f["Field"]: f["Value"] for f in json.loads(body)["Filters"]}
            self.server.aws_filters.append(filters)
            usd = AWS_ON_DEMAND_USD.get(filters["instanceType"])
            prices = [_aws_product(filters["instanceType"], usd)] if usd else []
            answer = {"FormatVersion": "aws_v1", "PriceList": prices}
            self._send(json.dumps(answer).encode(), "application/x-amz-json-1.1")
            return
        form = urllib.parse.parse_qs(body.decode())
        assert form["Action"] == ["DescribeSpotPriceHistory"], form
        types = [v[0] for k, v in form.items() if k.startswith("InstanceType.")]
        self._send(_spot_xml(types), "text/xml")


@pytest.fixture
def price_apis():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakePriceApis)
    server.azure_filters, server.aws_filters = [], []
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    host, port = server.server_address
    server.url = f"http://{host}:{port}"
    yield server
    server.shutdown()
    server.server_close()


def _warnings():
    seen: list[str] = []
    return seen, seen.append


def test_azure_live_prices_take_newest_linux_meters_across_pages(price_apis):
    prices = pricing.fetch_azure_prices(
        ["Standard_NC4as_T4_v3", "Standard_NC24ads_A100_v4"],
        "eastus",
        url=f"{price_apis.url}/api/retail/prices",
    )
    t4 = prices["Standard_NC4as_T4_v3"]
    assert (t4.on_demand_usd_per_hour, t4.spot_usd_per_hour, t4.region) == (0.6, 0.2, "eastus")
    assert t4.live
    assert prices["Standard_NC24ads_A100_v4"].spot_usd_per_hour is None
    assert len(price_apis.azure_filters) == 2  # followed NextPageLink once


def test_azure_query_filters_region_consumption_and_each_size(price_apis):
    pricing.fetch_azure_prices(["Standard_NC4as_T4_v3"], "westeurope",
                               url=f"{price_apis.url}/api/retail/prices")  # fmt: skip
    query = price_apis.azure_filters[0]
    assert "armRegionName eq 'westeurope'" in query
    assert "priceType eq 'Consumption'" in query
    assert "armSkuName eq 'Standard_NC4as_T4_v3'" in query


def test_aws_live_prices_from_price_list_and_spot_history(price_apis, aws_credentials):
    prices = pricing.fetch_aws_prices(
        ["g5.xlarge", "p3.2xlarge"],
        "us-east-1",
        pricing_endpoint_url=price_apis.url,
        ec2_endpoint_url=price_apis.url,
    )
    g5 = prices["g5.xlarge"]
    assert g5.on_demand_usd_per_hour == 1.1
    assert g5.spot_usd_per_hour == pytest.approx(0.45)  # median of the zones' newest
    assert prices["p3.2xlarge"].spot_usd_per_hour is None
    assert price_apis.aws_filters[0] == {
        "instanceType": "g5.xlarge",
        "regionCode": "us-east-1",
        "operatingSystem": "Linux",
        "tenancy": "Shared",
        "preInstalledSw": "NA",
        "capacitystatus": "Used",
    }


def test_live_prices_fill_missing_live_spot_from_the_snapshot(price_apis, aws_credentials):
    seen, warn = _warnings()
    sizes = [catalog.lookup("p3.2xlarge", "aws")]
    endpoints = pricing.PriceEndpoints(aws_pricing_url=price_apis.url, aws_ec2_url=price_apis.url)
    price = pricing.live_prices(sizes, None, warn, endpoints)["p3.2xlarge"]
    assert price.on_demand_usd_per_hour == 3.2
    assert price.spot_usd_per_hour == sizes[0].spot_usd_per_hour
    assert "spot snapshot" in price.source
    assert seen == []


def test_offline_azure_falls_back_to_the_snapshot_with_a_warning(closed_port_url):
    seen, warn = _warnings()
    size = catalog.lookup("Standard_NC4as_T4_v3", "azure")
    endpoints = pricing.PriceEndpoints(azure_url=closed_port_url, timeout_s=2)
    price = pricing.live_prices([size], None, warn, endpoints)[size.name]
    assert price == pricing.snapshot_price(size)
    assert len(seen) == 1 and "live azure prices unavailable" in seen[0]


def test_unreachable_aws_falls_back_to_the_snapshot_with_a_warning(
    closed_port_url, aws_credentials
):
    seen, warn = _warnings()
    size = catalog.lookup("g5.xlarge", "aws")
    endpoints = pricing.PriceEndpoints(
        aws_pricing_url=closed_port_url, aws_ec2_url=closed_port_url, timeout_s=2
    )
    price = pricing.live_prices([size], None, warn, endpoints)[size.name]
    assert price == pricing.snapshot_price(size)
    assert "live aws prices unavailable" in seen[0]


def test_aws_without_credentials_falls_back_with_a_warning(monkeypatch, tmp_path, price_apis):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    seen, warn = _warnings()
    size = catalog.lookup("g5.xlarge", "aws")
    endpoints = pricing.PriceEndpoints(aws_pricing_url=price_apis.url, aws_ec2_url=price_apis.url)
    assert pricing.live_prices([size], None, warn, endpoints)[size.name].source.startswith(
        "snapshot"
    )
    assert "credentials" in seen[0].lower()


def test_size_the_live_api_does_not_list_keeps_its_snapshot_price(price_apis):
    seen, warn = _warnings()
    listed = catalog.lookup("Standard_NC4as_T4_v3", "azure")
    unlisted = catalog.lookup("Standard_NC8as_T4_v3", "azure")
    endpoints = pricing.PriceEndpoints(azure_url=f"{price_apis.url}/api/retail/prices")
    prices = pricing.live_prices([listed, unlisted], None, warn, endpoints)
    assert prices[listed.name].live
    assert prices[unlisted.name] == pricing.snapshot_price(unlisted)
    assert seen == [f"no live azure price in eastus for {unlisted.name}; using the snapshot"]


def test_fab_plan_live_uses_the_price_apis_named_in_the_environment(price_apis, aws_credentials):
    env = {
        **os.environ,
        "GLUCOSE_AZURE_PRICES_URL": f"{price_apis.url}/api/retail/prices",
        "AWS_ENDPOINT_URL_PRICING": price_apis.url,
        "AWS_ENDPOINT_URL_EC2": price_apis.url,
    }
    fab = str(Path(sys.executable).with_name("fab"))
    done = subprocess.run(
        [fab, "plan", "--milestone", "M1", "--epochs", "1", "--live", "--json"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    rows = {r["size"]: r for r in json.loads(done.stdout)["rows"]}
    t4, g5 = rows["Standard_NC4as_T4_v3"], rows["g5.xlarge"]
    assert t4["price_source"].startswith("live")
    assert t4["on_demand_usd"] == pytest.approx(t4["hours"] * 0.6)
    assert g5["spot_usd"] == pytest.approx(g5["hours"] * 0.45)
    assert rows["g6.xlarge"]["price_source"].startswith("snapshot")  # not served by the fake
    assert "no live aws price in us-east-1 for" in done.stderr
