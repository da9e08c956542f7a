"""`make prices` (ops.plan.refresh_prices): stack/prices.json rewritten from the clouds'
price APIs and dated, tested offline against local servers answering with the samples
in price_api_samples/.

The samples are written field for field in the APIs' documented response formats (the
Azure Retail Prices API's page of Items, the Price List API's GetProducts answer whose
PriceList entries are JSON strings, EC2's DescribeSpotPriceHistory XML), with the
snapshot's own list prices; no machine this was built on reached the real APIs, so none
is a capture of a live answer.
"""

import json
import os
import subprocess
import urllib.parse
from datetime import date
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from ops.plan import refresh_prices
from ops.plan.pricing import PriceEndpoints, PriceFetchError
from stack import catalog, prices
from tests.fakes.local_http import LocalHttpServer, reply
from tests.paths import REPO

SAMPLES = Path(__file__).with_name("price_api_samples")
TODAY = date(2026, 11, 26)


class _SampledPriceApis(BaseHTTPRequestHandler):
    """Answers as the three APIs would, from the samples; `hidden` sizes are unlisted."""

    hidden: frozenset[str] = frozenset()

    def log_message(self, *args):
        pass

    def do_GET(self):  # Azure Retail Prices: the filtered query's one page
        page = json.loads((SAMPLES / "azure_retail_prices.json").read_text())
        page["Items"] = [i for i in page["Items"] if i["armSkuName"] not in self.hidden]
        reply(self, 200, json.dumps(page).encode(), "application/json")

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.headers.get("X-Amz-Target") == "AWSPriceListService.GetProducts":
            wanted = {f["Field"]: f["Value"] for f in json.loads(body)["Filters"]}["instanceType"]
            answer = json.loads((SAMPLES / "aws_get_products.json").read_text())
            answer["PriceList"] = [
                product
                for product in answer["PriceList"]
                if json.loads(product)["product"]["attributes"]["instanceType"] == wanted
                and wanted not in self.hidden
            ]
            reply(self, 200, json.dumps(answer).encode(), "application/x-amz-json-1.1")
            return
        assert urllib.parse.parse_qs(body.decode())["Action"] == ["DescribeSpotPriceHistory"]
        reply(self, 200, (SAMPLES / "aws_spot_price_history.xml").read_bytes(), "text/xml")


def _serve(hidden: frozenset[str] = frozenset()):
    return LocalHttpServer(type("Apis", (_SampledPriceApis,), {"hidden": hidden}))


@pytest.fixture
def apis(aws_credentials):
    server = _serve()
    yield PriceEndpoints(server.endpoint, server.endpoint, server.endpoint)
    server.close()


@pytest.fixture
def snapshot_copy(tmp_path):
    out = tmp_path / "prices.json"
    out.write_text((REPO / "stack" / "prices.json").read_text())
    return out


def test_a_refresh_writes_every_current_sizes_prices_dated_the_day(apis, snapshot_copy):
    refresh_prices.refresh(["azure", "aws"], snapshot_copy, apis, TODAY)
    written = prices.parse(snapshot_copy.read_text())
    for cloud in catalog.CLOUDS:
        assert written[cloud].date == "2026-11-26"
        assert written[cloud].source == refresh_prices.SOURCES[cloud]
        assert set(written[cloud].usd_per_hour) == {s.name for s in catalog.sizes(cloud)}
    azure, aws = written["azure"].usd_per_hour, written["aws"].usd_per_hour
    # Linux pay-as-you-go, newest meter; not the Windows, older or Low Priority rows.
    assert azure["Standard_NC4as_T4_v3"] == (0.526, 0.21)
    assert azure["Standard_NC40ads_H100_v5"] == (6.98, None)  # no Spot meter sampled
    assert aws["g5.xlarge"] == (1.006, pytest.approx(0.40))  # median of three zones
    assert aws["p5.48xlarge"] == (55.04, None)  # no spot history sampled


def test_a_size_no_reference_priced_keeps_its_row_through_a_refresh(apis, snapshot_copy):
    before = prices.parse(snapshot_copy.read_text())
    refresh_prices.refresh(["azure", "aws"], snapshot_copy, apis, TODAY)
    written = prices.parse(snapshot_copy.read_text())
    for cloud, name in (("aws", "p5e.48xlarge"), ("azure", "Standard_ND96isr_H200_v5")):
        assert written[cloud].usd_per_hour[name] == (None, None)  # never a made-up figure
        assert written[cloud].reference_of(name) == before[cloud].reference_of(name)
    # A size the API prices now takes the API's price and date, not its own reference.
    assert written["aws"].usd_per_hour["p5en.48xlarge"] == (63.296, None)
    assert written["aws"].reference_of("p5en.48xlarge") == (
        refresh_prices.SOURCES["aws"],
        "2026-11-26",
    )


def test_a_refresh_of_one_cloud_keeps_the_others_prices(apis, snapshot_copy):
    before = prices.parse(snapshot_copy.read_text())["aws"]
    refresh_prices.refresh(["azure"], snapshot_copy, apis, TODAY)
    assert prices.parse(snapshot_copy.read_text())["aws"] == before


def test_a_size_the_api_does_not_price_fails_the_refresh_and_writes_nothing(
    aws_credentials, snapshot_copy
):
    server = _serve(frozenset({"Standard_ND96asr_v4"}))
    endpoints = PriceEndpoints(server.endpoint, server.endpoint, server.endpoint)
    before = snapshot_copy.read_bytes()
    try:
        with pytest.raises(PriceFetchError, match="no azure price in eastus for Standard_ND96"):
            refresh_prices.refresh(["azure", "aws"], snapshot_copy, endpoints, TODAY)
    finally:
        server.close()
    assert snapshot_copy.read_bytes() == before


def test_the_shipped_snapshot_is_in_the_form_a_refresh_writes():
    text = (REPO / "stack" / "prices.json").read_text()
    assert prices.dump(prices.parse(text)) == text  # a refresh's diff shows only prices


def test_the_catalogs_current_sizes_are_priced_from_the_snapshot():
    for size in catalog.sizes():
        shipped = prices.of(size.cloud)
        assert (size.on_demand_usd_per_hour, size.spot_usd_per_hour) == shipped.usd_per_hour[
            size.name
        ]
        assert (size.price_region, (size.price_source, size.price_date)) == (
            shipped.region,
            shipped.reference_of(size.name),
        )


def test_make_prices_offline_fails_in_one_line_and_leaves_the_snapshot(closed_port_url):
    snapshot = REPO / "stack" / "prices.json"
    before = snapshot.read_bytes()
    done = subprocess.run(
        # -o: the venv is there already (a worktree's pyproject.toml may look newer);
        # `prices` needs what `make demo` installs.
        ["make", "--no-print-directory", "-o", ".venv/.demo-installed", "prices", "CLOUD=azure"],
        cwd=REPO,
        # Not make's own variables: under `make test` this make would be make[1].
        env={
            **{
                k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")
            },
            "GLUCOSE_AZURE_PRICES_URL": closed_port_url,
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    ours = [line for line in done.stderr.splitlines() if not line.startswith("make: ***")]
    assert len(ours) == 1 and ours[0].startswith("refresh_prices: Azure Retail Prices API at")
    assert "stack/prices.json is unchanged (it needs the internet" in ours[0]
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert snapshot.read_bytes() == before
