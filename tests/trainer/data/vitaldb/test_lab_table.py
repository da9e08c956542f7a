"""trainer.data.vitaldb.lab_table: glucose draws and PLETH cases from the open dataset's
tables, read ourselves (vitaldb.load_lab_data filters wrongly)."""

import gzip

import pytest

from tests.fixtures.vitaldb_cases import LABS_CSV
from trainer.config import UserError
from trainer.data.vitaldb.lab_table import cases_with_pleth, read_glucose_draws


def test_glucose_draws_are_the_gluc_rows_sorted_by_time():
    draws = read_glucose_draws(LABS_CSV).draws
    assert draws[11].dt_s.tolist() == [60.0, 200.0]
    assert draws[11].mg_dl.tolist() == [100.0, 140.0]  # the hb row at 60 s is not glucose


def test_draws_at_the_same_second_are_averaged():
    assert read_glucose_draws(LABS_CSV).draws[12].mg_dl.tolist() == [152.0]


def test_unreadable_or_implausible_results_are_ignored_and_counted():
    table = read_glucose_draws(LABS_CSV)
    assert table.draws[13].dt_s.tolist() == [0.0]  # "not-a-number" at 500 s dropped
    assert table.draws[17].mg_dl.tolist() == [130.0]  # 5000 mg/dL dropped
    assert table.ignored_rows == 2


def test_gzipped_table_with_a_byte_order_mark_reads_the_same(tmp_path):
    packed = tmp_path / "labs"
    packed.write_bytes(gzip.compress(("\ufeff" + LABS_CSV.read_text()).encode()))
    assert read_glucose_draws(packed).draws.keys() == read_glucose_draws(LABS_CSV).draws.keys()


def test_a_table_without_the_columns_names_file_and_columns(tmp_path):
    wrong = tmp_path / "labs.csv"
    wrong.write_text("case,time,test,value\n1,2,gluc,3\n")
    with pytest.raises(UserError, match=r"labs\.csv: no column caseid, dt, name, result"):
        read_glucose_draws(wrong)


def test_pleth_cases_come_from_the_track_list(tmp_path):
    trks = tmp_path / "trks"
    trks.write_text("caseid,tname,tid\n1,SNUADC/PLETH,a\n1,Solar8000/HR,b\n2,Solar8000/HR,c\n")
    assert cases_with_pleth(trks) == {1}
