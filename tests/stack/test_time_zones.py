import zoneinfo

import pytest

from stack.time_zones import IANA_TO_WINDOWS, windows_time_zone


@pytest.mark.parametrize("iana", sorted(IANA_TO_WINDOWS))
def test_every_mapped_zone_is_a_real_iana_zone(iana):
    zoneinfo.ZoneInfo(iana)


@pytest.mark.parametrize(
    ("iana", "windows"),
    [
        ("UTC", "UTC"),
        ("Europe/Berlin", "W. Europe Standard Time"),
        ("Europe/London", "GMT Standard Time"),
        ("America/New_York", "Eastern Standard Time"),
        ("America/Los_Angeles", "Pacific Standard Time"),
        ("Asia/Tokyo", "Tokyo Standard Time"),
        ("Australia/Sydney", "AUS Eastern Standard Time"),
    ],
)
def test_common_zones_map_to_their_cldr_windows_ids(iana, windows):
    assert windows_time_zone(iana) == windows


def test_unknown_zone_has_no_windows_id():
    assert windows_time_zone("America/Caracas") is None
