"""IANA time-zone names -> the Windows time-zone ids Azure's auto-shutdown expects.

`Microsoft.DevTestLab/schedules` takes `timeZoneId` as a Windows id ("W. Europe Standard
Time"), while people (and AWS EventBridge Scheduler) speak IANA ("Europe/Berlin"). The
mapping is Unicode CLDR's windowsZones.xml, cut to the zones a researcher is likely to
use; an IANA zone missing here is reported by config validation for Azure stacks.
"""

from __future__ import annotations

# fmt: off
_WINDOWS_IDS: dict[str, tuple[str, ...]] = {
    "UTC": ("UTC", "Etc/UTC", "Etc/GMT"),
    "GMT Standard Time": ("Europe/London", "Europe/Dublin", "Europe/Lisbon"),
    "Greenwich Standard Time": ("Atlantic/Reykjavik",),
    "W. Europe Standard Time": (
        "Europe/Berlin", "Europe/Amsterdam", "Europe/Vienna", "Europe/Rome",
        "Europe/Stockholm", "Europe/Oslo", "Europe/Zurich", "Europe/Luxembourg",
    ),
    "Romance Standard Time": (
        "Europe/Paris", "Europe/Brussels", "Europe/Madrid", "Europe/Copenhagen",
    ),
    "Central European Standard Time": ("Europe/Warsaw", "Europe/Zagreb"),
    "Central Europe Standard Time": ("Europe/Prague", "Europe/Budapest"),
    "FLE Standard Time": (
        "Europe/Helsinki", "Europe/Kyiv", "Europe/Kiev", "Europe/Riga", "Europe/Tallinn",
        "Europe/Vilnius", "Europe/Sofia",
    ),
    "GTB Standard Time": ("Europe/Athens", "Europe/Bucharest"),
    "Turkey Standard Time": ("Europe/Istanbul",),
    "Russian Standard Time": ("Europe/Moscow",),
    "Israel Standard Time": ("Asia/Jerusalem",),
    "Egypt Standard Time": ("Africa/Cairo",),
    "South Africa Standard Time": ("Africa/Johannesburg",),
    "W. Central Africa Standard Time": ("Africa/Lagos",),
    "E. Africa Standard Time": ("Africa/Nairobi",),
    "Arab Standard Time": ("Asia/Riyadh",),
    "Arabian Standard Time": ("Asia/Dubai",),
    "Pakistan Standard Time": ("Asia/Karachi",),
    "India Standard Time": ("Asia/Kolkata", "Asia/Calcutta"),
    "SE Asia Standard Time": ("Asia/Bangkok", "Asia/Jakarta", "Asia/Ho_Chi_Minh"),
    "Singapore Standard Time": ("Asia/Singapore", "Asia/Kuala_Lumpur", "Asia/Manila"),
    "China Standard Time": ("Asia/Shanghai", "Asia/Hong_Kong"),
    "Taipei Standard Time": ("Asia/Taipei",),
    "Korea Standard Time": ("Asia/Seoul",),
    "Tokyo Standard Time": ("Asia/Tokyo",),
    "W. Australia Standard Time": ("Australia/Perth",),
    "Cen. Australia Standard Time": ("Australia/Adelaide",),
    "E. Australia Standard Time": ("Australia/Brisbane",),
    "AUS Eastern Standard Time": ("Australia/Sydney", "Australia/Melbourne"),
    "New Zealand Standard Time": ("Pacific/Auckland",),
    "Hawaiian Standard Time": ("Pacific/Honolulu",),
    "Alaskan Standard Time": ("America/Anchorage",),
    "Pacific Standard Time": ("America/Los_Angeles", "America/Vancouver"),
    "US Mountain Standard Time": ("America/Phoenix",),
    "Mountain Standard Time": ("America/Denver", "America/Edmonton"),
    "Central Standard Time": ("America/Chicago", "America/Winnipeg"),
    "Central Standard Time (Mexico)": ("America/Mexico_City",),
    "Eastern Standard Time": ("America/New_York", "America/Toronto", "America/Detroit"),
    "Atlantic Standard Time": ("America/Halifax",),
    "Newfoundland Standard Time": ("America/St_Johns",),
    "SA Pacific Standard Time": ("America/Bogota", "America/Lima"),
    "Pacific SA Standard Time": ("America/Santiago",),
    "E. South America Standard Time": ("America/Sao_Paulo",),
    "Argentina Standard Time": ("America/Argentina/Buenos_Aires", "America/Buenos_Aires"),
}
# fmt: on

IANA_TO_WINDOWS: dict[str, str] = {
    iana: windows for windows, zones in _WINDOWS_IDS.items() for iana in zones
}


def windows_time_zone(iana: str) -> str | None:
    """The Windows id for an IANA zone, or None when the table does not know it."""
    return IANA_TO_WINDOWS.get(iana)
