import re

import pytest

from stack import catalog
from stack.catalog import CatalogError, lookup, sizes
from stack.config import ConfigError, validate
from tests.stack.test_config import GOOD

# fmt: off
AZURE_SIZES = {
    "Standard_NC4as_T4_v3", "Standard_NC8as_T4_v3", "Standard_NC16as_T4_v3",
    "Standard_NC64as_T4_v3", "Standard_NC24ads_A100_v4", "Standard_NC48ads_A100_v4",
    "Standard_NC96ads_A100_v4", "Standard_NC40ads_H100_v5", "Standard_NC80adis_H100_v5",
    "Standard_ND96asr_v4",
    # Issue 46: 8x H100 / 8x H200 with NVLink and InfiniBand.
    "Standard_ND96isr_H100_v5", "Standard_ND96isr_H200_v5",
}
AWS_SIZES = {
    "p3.2xlarge", "p3.8xlarge", "p3.16xlarge", "p4d.24xlarge", "p5.48xlarge", "g5.xlarge",
    "g5.2xlarge", "g5.4xlarge", "g5.8xlarge", "g5.12xlarge", "g6.xlarge",
    # Issue 40: what AWS sells today (checked against cfn-lint's and botocore's data).
    "p5.4xlarge", "g6.2xlarge", "g6.4xlarge", "g6.12xlarge", "g6e.xlarge", "g6e.2xlarge",
    "g6e.12xlarge",
    # Issue 46: 8x H200.
    "p5e.48xlarge", "p5en.48xlarge",
}
# fmt: on
RETIRED_NCV3 = ("Standard_NC6s_v3", "Standard_NC12s_v3", "Standard_NC24s_v3")


def test_current_sizes_of_each_cloud_are_the_promised_ones():
    assert {s.name for s in sizes("azure")} == AZURE_SIZES
    assert {s.name for s in sizes("aws")} == AWS_SIZES


def test_retired_sizes_are_listed_only_on_request():
    names = {s.name for s in sizes("azure", include_retired=True)}
    assert names == AZURE_SIZES | set(RETIRED_NCV3)


@pytest.mark.parametrize("name", RETIRED_NCV3)
def test_retired_size_names_retirement_date_and_a_current_replacement(name):
    with pytest.raises(CatalogError, match=r"retired by Azure on 2025-09-30") as info:
        lookup(name, "azure")
    replacement = re.search(r"use (\S+) instead", str(info.value)).group(1)
    assert lookup(replacement, "azure").gpu_model.startswith("A100")
    assert "Standard_NC4as_T4_v3 on a budget" in str(info.value)


def test_typo_suggests_the_close_name():
    with pytest.raises(CatalogError, match="did you mean Standard_NC24ads_A100_v4"):
        lookup("Standard_NC24ad_A100_v4", "azure")


def test_size_of_the_other_cloud_says_which_cloud_it_belongs_to():
    with pytest.raises(CatalogError, match=r"p3\.2xlarge is an aws size"):
        lookup("p3.2xlarge", "azure")


def test_nonsense_name_lists_the_known_sizes():
    with pytest.raises(CatalogError, match=r"known aws sizes: .*g5\.xlarge"):
        lookup("quantum-9000", "aws")


def test_lookup_ignores_case_and_returns_the_canonical_name():
    assert lookup("standard_nc24ads_a100_v4", "azure").name == "Standard_NC24ads_A100_v4"


def test_region_filter_keeps_only_sizes_offered_there():
    in_region = sizes("aws", region="eu-west-1")
    assert in_region and all("eu-west-1" in s.regions for s in in_region)
    assert "p5.48xlarge" not in {s.name for s in in_region}


@pytest.mark.parametrize("name", RETIRED_NCV3)
def test_a_retired_size_is_sold_nowhere(name):
    (size,) = [s for s in sizes("azure", include_retired=True) if s.name == name]
    assert size.regions == ()


@pytest.mark.parametrize("cloud", catalog.CLOUDS)
def test_sizes_are_cheapest_first_within_a_cloud_and_unpriced_ones_last(cloud):
    prices = [s.on_demand_usd_per_hour for s in sizes(cloud)]
    priced = [p for p in prices if p is not None]
    assert prices == sorted(priced) + [None] * (len(prices) - len(priced))


@pytest.mark.parametrize("cloud", catalog.CLOUDS)
def test_default_size_is_the_cheapest_current_size_of_the_cloud(cloud):
    assert catalog.default_size(cloud) == sizes(cloud)[0]


def test_every_row_is_internally_consistent():
    for size in sizes(include_retired=True):
        assert size.gpu_memory_gib == size.gpu.memory_gib, size.name
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", size.price_date), size.name
        assert size.price_source, size.name
        if size.on_demand_usd_per_hour is None:
            assert size.spot_usd_per_hour is None, size.name  # no spot without its cap
            continue
        assert size.on_demand_usd_per_hour > 0, size.name
        if size.status == "available" and size.regions_known:
            assert size.price_region in size.regions, size.name
        if size.spot_usd_per_hour is not None:
            assert 0 < size.spot_usd_per_hour < size.on_demand_usd_per_hour, size.name


def test_price_scales_with_gpu_count_within_a_family():
    one = lookup("Standard_NC24ads_A100_v4", "azure")
    four = lookup("Standard_NC96ads_A100_v4", "azure")
    assert four.on_demand_usd_per_hour == pytest.approx(4 * one.on_demand_usd_per_hour)


def test_spot_price_is_used_when_known_and_on_demand_is_the_cap_otherwise():
    g5 = lookup("g5.xlarge", "aws")
    h100 = lookup("Standard_NC40ads_H100_v5", "azure")
    assert g5.hourly_price_usd(spot=True) == g5.spot_usd_per_hour
    assert g5.hourly_price_usd(spot=False) == g5.on_demand_usd_per_hour
    assert h100.spot_usd_per_hour is None
    assert h100.hourly_price_usd(spot=True) == h100.on_demand_usd_per_hour


def test_gpu_table_marks_bf16_only_where_the_hardware_has_it():
    assert catalog.GPUS["T4"].bf16_tflops == 0
    assert catalog.GPUS["V100 16GB"].bf16_tflops == 0
    assert catalog.GPUS["A100 80GB"].bf16_tflops > 0
    assert catalog.GPUS["V100 16GB"].compute_capability == "7.0"


def test_a_row_naming_an_unknown_gpu_is_refused():
    with pytest.raises(ValueError, match="missing from GPUS"):
        catalog.VmSize("x", "aws", "Z80", 1, 1, 1, 1, 1.0, None, "us-east-1", ("us-east-1",))


def test_unknown_cloud_is_refused():
    with pytest.raises(CatalogError, match="not one of azure, aws"):
        lookup("g5.xlarge", "gcp")


@pytest.mark.parametrize(
    ("name", "cloud", "region", "gpus"),
    [
        ("p5e.48xlarge", "aws", "us-east-2", "8x H200 141GB"),
        ("p5en.48xlarge", "aws", "us-east-1", "8x H200 141GB"),
        ("Standard_ND96isr_H100_v5", "azure", None, "8x H100 80GB"),
        ("Standard_ND96isr_H200_v5", "azure", None, "8x H200 141GB"),
    ],
)
def test_the_eight_gpu_hopper_sizes_carry_their_gpus_and_where_they_sell(name, cloud, region, gpus):
    size = lookup(name, cloud)
    assert f"{size.gpu_count}x {size.gpu_model}" == gpus
    assert size.gpu_link == "NVLink 4" and size.driver_class == "open"
    # AWS from cfn-lint's per-region data; the Azure snapshot never listed these sizes.
    assert size.regions_known == (region is not None)
    assert region is None or region in size.regions


@pytest.mark.parametrize(
    ("name", "cloud", "usd", "date", "source"),
    [
        ("p5en.48xlarge", "aws", 63.296, "2026-08-06", "https://github.com/dstackai/dstack/pull/"),
        ("Standard_ND96isr_H100_v5", "azure", 98.32, "2026-11-09", "https://raw.githubuserc"),
    ],
)
def test_a_size_priced_from_its_own_reference_carries_that_references_source_and_date(
    name, cloud, usd, date, source
):
    size = lookup(name, cloud)
    assert (size.on_demand_usd_per_hour, size.price_date) == (usd, date)
    assert size.price_source.startswith(source)
    assert size.hourly_price_usd(spot=False) == usd


@pytest.mark.parametrize(
    ("name", "cloud", "why"),
    [
        ("p5e.48xlarge", "aws", "the AWS Price List prices p5e.48xlarge on demand in no region"),
        ("Standard_ND96isr_H200_v5", "azure", "no offline reference"),
    ],
)
def test_a_size_no_reference_prices_says_where_it_was_looked_for_and_is_never_priced(
    name, cloud, why
):
    size = lookup(name, cloud)
    assert size.on_demand_usd_per_hour is None
    assert why in size.unpriced and size.price_date in size.unpriced
    for spot in (False, True):
        with pytest.raises(CatalogError, match=f"{name}: no on-demand price"):
            size.hourly_price_usd(spot)


@pytest.mark.parametrize(
    ("raw", "region", "size"),
    [
        ({"cloud": "aws", "vmSize": "p5e.48xlarge"}, "us-east-2", "p5e.48xlarge"),
        ({"vmSize": "Standard_ND96isr_H200_v5"}, "eastus", "Standard_ND96isr_H200_v5"),
        # A fallback is a size the boxes may bill on, too.
        ({"vmSize": "Standard_ND96isr_H100_v5", "fallbackVmSizes": '["Standard_ND96isr_H200_v5"]'},
         "eastus", "Standard_ND96isr_H200_v5"),
    ],
)  # fmt: skip
def test_a_stack_on_a_size_without_a_price_is_refused_in_one_line_naming_why(raw, region, size):
    with pytest.raises(ConfigError) as info:
        validate({**GOOD, **raw}, region)
    (line,) = [p for p in info.value.problems if size in p]
    assert "no on-demand price" in line and "`make prices CLOUD=" in line
    assert "\n" not in line
