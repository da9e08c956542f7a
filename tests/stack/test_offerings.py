"""Which regions sell which size: the dated snapshot, its refresh, what validation does with it."""

import datetime
import json
import urllib.parse
from http.server import BaseHTTPRequestHandler

import pytest

from stack import catalog, cloud_limits, offerings, refresh_offerings
from stack.config import ConfigError, validate
from stack.offerings import Offerings
from tests.fakes.local_http import LocalHttpServer, reply
from tests.stack.test_config import GOOD


def test_the_aws_snapshot_is_what_the_installed_cfn_lint_says():
    names = [s.name for s in catalog.sizes("aws")]
    assert offerings.of("aws") == refresh_offerings.aws_offerings(names)


def test_every_current_aws_size_of_the_catalog_has_offerings():
    for size in catalog.sizes("aws"):
        assert size.name in offerings.of("aws").regions, size.name


def test_a_size_the_snapshot_never_listed_is_unknown_there_not_unsold():
    # The Azure hand list predates ND H100 v5: no region of it may refuse the size.
    size = catalog.lookup("Standard_ND96isr_H100_v5", "azure")
    assert not offerings.of("azure").lists(size.name) and not size.regions_known
    assert cloud_limits.size_problems("azure", "eastus", size.name, False) == []
    assert size.name not in {s.name for s in catalog.sizes("azure", "eastus")}


def test_no_g6_size_is_sold_in_eu_west_1():
    assert "eu-west-1" not in catalog.lookup("g6.xlarge", "aws").regions
    assert "eu-west-1" in catalog.lookup("g5.xlarge", "aws").regions


def test_aws_offerings_leave_out_the_china_and_govcloud_partitions():
    regions = {r for rs in offerings.of("aws").regions.values() for r in rs}
    assert not {r for r in regions if r.startswith(("cn-", "us-gov-"))}


def test_the_azure_half_says_it_is_a_hand_list_until_refreshed():
    azure = offerings.of("azure")
    assert azure.source.startswith("hand list, to be refreshed")
    assert datetime.date.fromisoformat(azure.date)


def test_a_spot_stack_where_the_snapshot_sells_no_spot_is_refused(monkeypatch):
    sold = offerings.of("azure")
    only_on_demand = Offerings(
        "azure", "test", "2026-11-01", sold.regions, {"Standard_NC4as_T4_v3": ("westus2",)}
    )
    monkeypatch.setattr(offerings, "snapshot", lambda: {"azure": only_on_demand})
    with pytest.raises(ConfigError) as info:
        validate({**GOOD, "spot": "true"}, "eastus")
    (problem,) = info.value.problems
    assert problem.startswith("spot: Standard_NC4as_T4_v3 is not sold as spot in eastus")
    assert problem.endswith("westus2")


class _RetailPrices(BaseHTTPRequestHandler):
    """Two pages of the Retail Prices API: Linux and Windows, on-demand, Spot, Low Priority."""

    def do_GET(self):
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
        type(self).filters.append(query.get("$filter", [""])[0])
        second = "page" in query
        item = {"armSkuName": "Standard_NC4as_T4_v3", "productName": "NCasT4_v3 Series"}
        items = (
            [
                {**item, "armRegionName": "westus3", "meterName": "NC4as T4 v3 Spot"},
                {**item, "armRegionName": "uksouth", "meterName": "NC4as T4 v3 Low Priority"},
            ]
            if second
            else [
                {**item, "armRegionName": "eastus", "meterName": "NC4as T4 v3"},
                {**item, "armRegionName": "westus3", "meterName": "NC4as T4 v3"},
                {
                    **item,
                    "armRegionName": "brazilsouth",
                    "meterName": "NC4as T4 v3",
                    "productName": "NCasT4_v3 Series Windows",
                },
            ]
        )
        link = None if second else f"http://{self.headers['Host']}/prices?page=2"
        body = json.dumps({"Items": items, "NextPageLink": link}).encode()
        reply(self, 200, body, "application/json")

    def log_message(self, *_args):
        pass


@pytest.fixture
def retail_prices():
    _RetailPrices.filters = []
    server = LocalHttpServer(_RetailPrices)
    yield server
    server.close()


def test_azure_refresh_follows_pages_and_keeps_linux_on_demand_and_spot(retail_prices):
    sold = refresh_offerings.azure_offerings(
        ["Standard_NC4as_T4_v3"], f"{retail_prices.endpoint}/prices", datetime.date(2026, 11, 23)
    )
    assert sold.regions == {"Standard_NC4as_T4_v3": ("eastus", "westus3")}
    assert sold.spot_regions == {"Standard_NC4as_T4_v3": ("westus3",)}
    assert (sold.date, sold.source) == ("2026-11-23", "Azure Retail Prices API 2023-01-01-preview")
    assert "armSkuName eq 'Standard_NC4as_T4_v3'" in _RetailPrices.filters[0]


def test_refreshing_one_cloud_keeps_the_other_as_it_was(retail_prices, tmp_path):
    out = tmp_path / "offerings.json"
    out.write_text(json.dumps({"aws": offerings.of("aws").to_json()}))
    code = refresh_offerings.main(
        ["--cloud", "azure", "--out", str(out), "--azure-prices-url", retail_prices.endpoint]
    )
    written = json.loads(out.read_text())
    assert code == 0
    assert written["aws"] == offerings.of("aws").to_json()
    assert written["azure"]["regions"]["Standard_NC4as_T4_v3"] == ["eastus", "westus3"]
    assert set(written["azure"]["regions"]) == {s.name for s in catalog.sizes("azure")}


def test_an_unreachable_price_api_leaves_the_snapshot_unchanged(tmp_path, capsys):
    out = tmp_path / "offerings.json"
    before = json.dumps({"aws": offerings.of("aws").to_json()})
    out.write_text(before)
    server = LocalHttpServer(_RetailPrices)
    endpoint = server.endpoint
    server.close()
    code = refresh_offerings.main(
        ["--cloud", "azure", "--out", str(out), "--azure-prices-url", endpoint]
    )
    assert code == 1 and out.read_text() == before
    assert "is unchanged" in capsys.readouterr().err
