import pytest
from tzlocal.windows_tz import tz_win

from stack.config import ConfigError, validate
from stack.time_zones import iana_zones, windows_time_zone
from tests.stack.test_config import GOOD

CLDR_ZONES = sorted(zone for zone in tz_win if zone)


@pytest.mark.parametrize(
    ("iana", "windows"),
    [
        ("UTC", "UTC"),
        ("Europe/Berlin", "W. Europe Standard Time"),
        ("America/New_York", "Eastern Standard Time"),
        ("Australia/Sydney", "AUS Eastern Standard Time"),
        # CLDR's own ids for the zones tz 2026f moves to permanent daylight time; the
        # hand map this replaced said Pacific/Mountain/Central Standard Time.
        ("America/Vancouver", "British Columbia Standard Time"),
        ("America/Edmonton", "Alberta Standard Time"),
        ("America/Winnipeg", "Manitoba Standard Time"),
    ],
)
def test_zones_map_to_their_cldr_windows_ids(iana, windows):
    assert windows_time_zone(iana) == windows


def test_a_zone_cldr_does_not_map_has_no_windows_id():
    assert windows_time_zone("Antarctica/Troll") is None
    assert windows_time_zone("") is None


def test_every_zone_cldr_maps_is_accepted_on_azure():
    refused = []
    for zone in CLDR_ZONES:
        try:
            validate({**GOOD, "autoShutdownTimeZone": zone}, "eastus")
        except ConfigError as error:
            refused.append((zone, error.problems))
    assert refused == []


def test_every_zone_cldr_maps_is_in_the_tz_database():
    assert set(CLDR_ZONES) <= iana_zones()


@pytest.mark.parametrize("name", ["posix/Europe/Berlin", "right/UTC", "localtime", "Factory"])
def test_system_files_that_are_not_zones_are_refused_on_aws(name):
    with pytest.raises(ConfigError, match="expected an IANA zone"):
        validate(
            {**GOOD, "cloud": "aws", "vmSize": "g5.xlarge", "autoShutdownTimeZone": name},
            "us-east-1",
        )
