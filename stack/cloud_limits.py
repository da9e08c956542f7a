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
    """`vm_size` is a current size of `cloud`, priced, and sold in `region` (as spot,
    when asked): every one of these it fails, a line each."""
    try:
        size = catalog.lookup(vm_size, cloud)
    except catalog.CatalogError as exc:
        return [f"vmSize: {exc}"]
    problems = []
    if size.unpriced:
        # hourlyPriceUsd, `fab status` and a run's cost all need a price: none is made up.
        problems.append(
            f"vmSize: {size.unpriced}; pick a priced size (`fab plan` lists them) or read "
            f"one with `make prices CLOUD={cloud}`"
        )
    return problems + _sold_problems(cloud, region, size, spot)


def _sold_problems(cloud: str, region: str | None, size: catalog.VmSize, spot: bool) -> list[str]:
    """Where `size` is sold: in `region`, and as spot there when asked (each check only
    where the one before holds: a size not sold there is not sold as spot there)."""
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
    if size.regions_known and region not in size.regions:
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


# --- fallbacks and zones (issue 40: docs/capacity.md, "When the cloud has no GPU") -------
MAX_FALLBACK_VM_SIZES = 5
AZURE_ZONES = ("1", "2", "3")
CAPACITY_WAIT_MINUTES_RANGE = (0, 120)
# What a box's image and disk are made for: a fallback must boot the same way.
_SAME_AS_VM_SIZE = (
    ("gpu_count", "GPU count", "{} GPU(s)"),
    ("driver_class", "driver class", "the {} NVIDIA driver"),
    ("security_type", "security profile", "security type {}"),
)


def placement_problems(v: dict) -> list[str]:
    """`fallbackVmSizes`, `zones`, `spotFallback`, `capacityWaitMinutes` of parsed config
    values `v`, one line per mistake."""
    cloud = v.get("cloud")
    if cloud not in catalog.CLOUDS:
        return []
    problems = _fallback_problems(cloud, v) + _zone_problems(cloud, v.get("region"), v)
    if v.get("spot_fallback") and not v.get("spot"):
        problems.append(
            "spotFallback: true means on-demand after every spot pool, but this stack is not "
            "spot; set spot: true or remove spotFallback"
        )
    wait = v.get("capacity_wait_minutes")
    low, high = CAPACITY_WAIT_MINUTES_RANGE
    if wait is not None and not low <= wait <= high:
        problems.append(f"capacityWaitMinutes: got {wait}, expected {low} to {high}")
    return problems


def _fallback_problems(cloud: str, v: dict) -> list[str]:
    """Too many sizes, and every problem of each size listed: one round of fixes, not
    one for the count and another for what the count hid."""
    names = v.get("fallback_vm_sizes") or ()
    problems = []
    if len(names) > MAX_FALLBACK_VM_SIZES:
        problems.append(
            f"fallbackVmSizes: got {len(names)} sizes, expected at most "
            f"{MAX_FALLBACK_VM_SIZES}; keep the ones you would pay for"
        )
    try:
        first = catalog.lookup(v.get("vm_size") or catalog.default_size(cloud).name, cloud)
    except catalog.CatalogError:
        return problems  # vmSize's own problem is said already
    seen = {first.name}
    for name in names:
        problems += [
            f"fallbackVmSizes: {problem}"
            for problem in _fallback_size_problems(cloud, v, first, name, seen)
        ]
    return problems


def _fallback_size_problems(
    cloud: str, v: dict, first: catalog.VmSize, name: str, seen: set
) -> list[str]:
    try:
        size = catalog.lookup(name, cloud)
    except catalog.CatalogError as exc:
        return [str(exc)]
    if size.name in seen:
        return [f"{size.name} is listed twice (vmSize is tried first); list each size once"]
    seen.add(size.name)
    problems = [problem for problem in [_boots_unlike(size, first)] if problem]
    # The region's own problem (no catalog size sold there) is vmSize's, said once.
    sold = size_problems(cloud, v.get("region"), size.name, bool(v.get("spot")))
    region_key = f"{REGION_KEYS[cloud]}:"
    return problems + [p.removeprefix("vmSize: ") for p in sold if not p.startswith(region_key)]


def _boots_unlike(size: catalog.VmSize, first: catalog.VmSize) -> str:
    """What `size` has that vmSize `first` has not and a box needs alike, in one line."""
    unlike = [
        (what, shown.format(getattr(size, field)), shown.format(getattr(first, field)))
        for field, what, shown in _SAME_AS_VM_SIZE
        if getattr(size, field) != getattr(first, field)
    ]
    if not unlike:
        return ""
    has = "; ".join(
        f"{size.name} has {own}, vmSize {first.name} has {its}" for _, own, its in unlike
    )
    whats = " and ".join(what for what, _, _ in unlike)
    return (
        f"{has}: a fallback must have the same {whats} (the box's image and disk are made "
        "for vmSize); remove it"
    )


def _zone_problems(cloud: str, region: str | None, v: dict) -> list[str]:
    zones = v.get("zones") or ()
    problems = []
    if len(set(zones)) != len(zones):
        problems.append(
            f"zones: {list(zones)} lists a zone twice; list each once, in the order to try"
        )
    if cloud == "azure":
        wrong = [zone for zone in zones if zone not in AZURE_ZONES]
        expected = f"Azure's zone numbers {', '.join(AZURE_ZONES)}"
    else:
        # A zone of the region: its name and one letter (us-east-1a); Local Zones and
        # Wavelength zones have other names and sell no GPU size of the catalog.
        wrong = [zone for zone in zones if not (region and _aws_zone_of(zone, region))]
        expected = f"zones of {region or 'the region'} such as {region or 'us-east-1'}a"
    if wrong:
        problems.append(f"zones: got {', '.join(map(repr, wrong))}, expected {expected}")
    return problems


def _aws_zone_of(zone: str, region: str) -> bool:
    return len(zone) == len(region) + 1 and zone.startswith(region) and zone[-1].isalpha()
