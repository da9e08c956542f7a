"""The config checks the clouds' own references decide, before any resource exists.

Which regions sell a size (`stack.offerings`, a dated snapshot of each cloud's
reference), which time zones a schedule may name (the tz database; on Azure also
CLDR's Windows ids) and how many addresses a budget alert takes. `stack.config` runs
them with the rest of its checks; each problem is one line with the fix.
"""

from __future__ import annotations

import difflib

from stack import catalog, offerings, time_zones

# Where each cloud keeps its region: the provider's own config (`pulumi config set`).
REGION_KEYS: dict[str, str] = {"azure": "azure-native:location", "aws": "aws:region"}
# How many addresses a budget's alert may go to: AWS Budgets takes at most 11
# subscribers per notification and per budget action (botocore budgets `Subscribers`),
# an Azure budget notification at most 50 contact e-mails. The reference test
# (tests/pulumi/test_cloud_references.py) proves both equal to the references.
MAX_ALERT_EMAILS: dict[str, int] = {"aws": 11, "azure": 50}


def size_problems(cloud: str, region: str | None, vm_size: str, spot: bool) -> list[str]:
    """`vm_size` is a current size of `cloud`, sold in `region` (as spot, when asked)."""
    try:
        size = catalog.lookup(vm_size, cloud)
    except catalog.CatalogError as exc:
        return [f"vmSize: {exc}"]
    if not region:
        return []
    sold = offerings.of(cloud)
    there = [s.name for s in catalog.sizes(cloud, region)]
    if not there:
        known = sorted({r for s in catalog.sizes(cloud) for r in s.regions})
        close = difflib.get_close_matches(region, known, n=1)
        return [
            f"{REGION_KEYS[cloud]}: no GPU size of the catalog is sold in {region!r} (offerings "
            f"of {sold.label}); "
            + (f"did you mean {close[0]}?" if close else f"regions: {', '.join(known)}")
        ]
    if region not in size.regions:
        return [
            f"vmSize: {size.name} is not sold in {region} (offerings of {sold.label}); pick "
            f"a size sold there ({', '.join(there)}) or a region selling {size.name} "
            f"({', '.join(size.regions)})"
        ]
    if spot and sold.sells_spot(size.name, region) is False:
        selling = (sold.spot_regions or {}).get(size.name, ())
        return [
            f"spot: {size.name} is not sold as spot in {region} (offerings of {sold.label}); "
            f"set spot false or pick a region selling it as spot: {', '.join(selling) or 'none'}"
        ]
    return []


def time_zone_problems(zone: str, cloud: str | None) -> list[str]:
    """An IANA zone of the tz database; on Azure also one CLDR gives a Windows id."""
    if zone not in time_zones.iana_zones():
        close = difflib.get_close_matches(zone, sorted(time_zones.iana_zones()), n=1)
        hint = f"did you mean {close[0]}?" if close else "e.g. Europe/Berlin"
        return [
            f"autoShutdownTimeZone: got {zone!r}, expected an IANA zone of tz "
            f"{time_zones.tz_database_version()}; {hint}"
        ]
    if cloud == "azure" and time_zones.windows_time_zone(zone) is None:
        return [
            f"autoShutdownTimeZone: {zone!r} has no Windows time-zone id in CLDR's "
            "windowsZones (Azure auto-shutdown needs one); use the zone of a city with "
            "the same clock, e.g. Europe/Berlin or America/New_York"
        ]
    return []


def alert_email_problems(cloud: str | None, emails: tuple[str, ...]) -> list[str]:
    """No more addresses than the cloud's budget alert takes."""
    most = MAX_ALERT_EMAILS.get(cloud or "")
    if most is None or len(emails) <= most:
        return []
    return [
        f"alertEmails: got {len(emails)} addresses, {cloud} budget alerts take at most {most}; "
        f"keep {most} or fewer (a mailing list counts as one)"
    ]
