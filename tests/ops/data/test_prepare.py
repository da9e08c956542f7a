"""`fab prepare-data`: flag mistakes end in one line before any box is asked (the run
on a box is in test_fab_e2e.py)."""

import pytest

from tests.ops.conftest import assert_one_line_error


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        ((), ("pass --milestone M1|M2|M3 or --cases",)),
        (("--milestone", "M1", "--cases", "1,2"), ("one of them",)),
        (("--cases", "1,5,9"), ("--cases needs --name",)),
        (("--milestone", "M9"), ("--milestone 'M9'", "M1, M2, M3")),
    ],
)
def test_flag_mistakes_are_one_line(local_box, args, fragments):
    assert_one_line_error(local_box.fab("prepare-data", *args), *fragments)


def test_a_dataset_name_unfit_for_paths_is_refused(local_box):
    result = local_box.fab("prepare-data", "--milestone", "M1", "--name", "../up")
    assert_one_line_error(result, "--name '../up' is not a usable dataset name")
