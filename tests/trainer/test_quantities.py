"""trainer.quantities: the one grammar of durations and counts, `fab`'s and the trainer's."""

import pytest

from trainer.quantities import parse_count, parse_duration


@pytest.mark.parametrize(
    ("text", "unit", "expected"),
    [
        ("90m", "h", 1.5),
        ("2h", "h", 2.0),
        ("1h30m", "h", 1.5),
        ("1.5", "h", 1.5),
        ("10m", "s", 600.0),
        ("45s", "s", 45.0),
        ("600", "s", 600.0),
        ("1.5h", "m", 90.0),
        (" 2H ", "h", 2.0),
        ("0", "m", 0.0),
        ("1 h 30 min", "h", 1.5),  # as `fab status` prints a duration
        ("90min", "h", 1.5),
        ("2 hours", "h", 2.0),
        ("45 sec", "s", 45.0),
    ],
)
def test_a_duration_is_a_suffixed_time_or_a_bare_number_of_the_flags_unit(text, unit, expected):
    assert parse_duration(text, unit) == pytest.approx(expected)


@pytest.mark.parametrize(
    "text", ["", "2x", "h", "2 weeks", "1 h x", "1d", "nan", "inf", "-1h", "2h-5m", "min"]
)
def test_a_duration_in_another_form_is_refused_naming_the_forms_and_the_unit(text):
    with pytest.raises(ValueError, match=r"is not a duration such as 90m, 2h .* number of hours"):
        parse_duration(text, "h")


def test_a_whole_duration_is_an_int_and_refuses_a_fraction_of_its_unit():
    assert parse_duration("1h", "m", whole=True) == 60
    assert isinstance(parse_duration("1h", "m", whole=True), int)
    with pytest.raises(ValueError, match="not a whole number of minutes"):
        parse_duration("90s", "m", whole=True)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("20", 20),
        ("600k", 600_000),
        ("600K", 600_000),
        ("1e6", 1_000_000),
        ("1.2M", 1_200_000),
        ("2.4m", 2_400_000),
        ("1.1k", 1_100),
        ("-5", -5),
    ],
)
def test_a_count_takes_k_m_and_exponents_exactly(text, expected):
    assert parse_count(text) == expected


@pytest.mark.parametrize("text", ["", "1.5", "abc", "1e-3", "k", "1.2345k", "nan", "inf", "3x"])
def test_a_count_that_is_no_whole_number_is_refused_naming_the_forms(text):
    with pytest.raises(ValueError, match=r"is not a whole number such as 20, 600k, 1.2M or 1e6"):
        parse_count(text)
