"""The Azure Retail Prices API, page by page: the one client of it.

https://learn.microsoft.com/rest/api/cost-management/retail-prices/azure-retail-prices
Public, no account: a GET with an OData `$filter` answers `Items` and, while more are
left, `NextPageLink`. `fab plan --live` reads one region's prices from it
(`ops/plan/pricing.py`), `python -m stack.refresh_offerings` every region that sells
a size (`stack/refresh_offerings.py`).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable

URL = "https://prices.azure.com/api/retail/prices"
URL_ENV = "GLUCOSE_AZURE_PRICES_URL"  # points both readers at a fake
API_VERSION = "2023-01-01-preview"


class RetailPricesError(RuntimeError):
    """The API could not be read, or did not answer as documented."""


def vm_filter(names: Iterable[str], region: str | None = None) -> str:
    """The pay-as-you-go meters of VM sizes `names`, in `region` (None: every region)."""
    skus = " or ".join(f"armSkuName eq '{name}'" for name in names)
    where = f" and armRegionName eq '{region}'" if region else ""
    return f"serviceName eq 'Virtual Machines'{where} and priceType eq 'Consumption' and ({skus})"


def items(odata_filter: str, url: str, timeout_s: float, max_pages: int) -> list[dict]:
    """Every item the filter selects, following `NextPageLink`; RetailPricesError when a
    page cannot be read, holds no `Items`, or more than `max_pages` come."""
    query = urllib.parse.urlencode(
        {"api-version": API_VERSION, "$filter": odata_filter}, quote_via=urllib.parse.quote
    )
    page_url: str | None = f"{url}?{query}"
    found: list[dict] = []
    for _ in range(max_pages):
        if not page_url:
            return found
        page = _page(page_url, timeout_s)
        if not isinstance(page.get("Items"), list):
            raise RetailPricesError(
                f"Azure Retail Prices API answered without Items: {page!r:.200}"
            )
        found.extend(page["Items"])
        page_url = page.get("NextPageLink")
    if not page_url:
        return found
    raise RetailPricesError(f"Azure Retail Prices API: still paging after {max_pages} pages")


def _page(page_url: str, timeout_s: float) -> dict:
    try:
        with urllib.request.urlopen(page_url, timeout=timeout_s) as response:
            return json.load(response)
    except (urllib.error.URLError, TimeoutError, OSError, ValueError) as error:
        where = page_url.split("?")[0]
        raise RetailPricesError(f"Azure Retail Prices API at {where}: {error}") from None
