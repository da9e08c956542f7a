"""Time-zone names: which IANA zones a stack may name, and the Windows ids Azure wants.

AWS EventBridge Scheduler takes IANA names ("Europe/Berlin"); Azure's auto-shutdown
(`Microsoft.DevTestLab/schedules`) takes a Windows id ("W. Europe Standard Time"), whose
valid values are TimeZoneConverter's `KnownWindowsTimeZoneIds`, themselves Unicode
CLDR's windowsZones.xml. Both lists come from packages that track their sources rather
than from a hand map: the IANA names from `tzdata` (PyPI's copy of the tz database, so
the answer does not depend on the machine's /usr/share/zoneinfo), the Windows ids from
`tzlocal.windows_tz`, generated from CLDR's windowsZones.xml.
"""

from __future__ import annotations

import functools
import importlib.resources

from tzlocal.windows_tz import tz_win

# In the tz database's list, but not a place: "Factory" means "time zone unknown".
_NOT_A_PLACE = frozenset({"Factory"})


@functools.cache
def iana_zones() -> frozenset[str]:
    """Every IANA zone name of the installed tz database (links included)."""
    listed = importlib.resources.files("tzdata").joinpath("zones").read_text().split()
    return frozenset(listed) - _NOT_A_PLACE


def tz_database_version() -> str:
    """The tz database release the zone names come from, e.g. "2026f"."""
    import tzdata

    return tzdata.IANA_VERSION


def windows_time_zone(iana: str) -> str | None:
    """CLDR's Windows id for an IANA zone, or None when CLDR maps no Windows id to it."""
    return tz_win.get(iana) if iana else None  # tzlocal's table carries an empty key
