import json

import numpy as np

from trainer.__main__ import main
from trainer.config import SynthConfig
from trainer.data.synth import synthesize


def _arrays(directory):
    return [np.load(directory / name) for name in ("windows.npy", "glucose.npy", "case_id.npy")]


def test_same_seed_writes_identical_dataset(tmp_path):
    a = synthesize(SynthConfig(tmp_path / "a", 3, 20, 64, seed=7))
    b = synthesize(SynthConfig(tmp_path / "b", 3, 20, 64, seed=7))
    for left, right in zip(_arrays(a), _arrays(b), strict=True):
        np.testing.assert_array_equal(left, right)


def test_other_seed_writes_other_waveforms(tmp_path):
    a = synthesize(SynthConfig(tmp_path / "a", 3, 20, 64, seed=1))
    b = synthesize(SynthConfig(tmp_path / "b", 3, 20, 64, seed=2))
    assert not np.array_equal(_arrays(a)[0], _arrays(b)[0])


def test_dataset_has_the_contract_shapes_and_dtypes(tmp_path):
    windows, glucose, case_id = _arrays(synthesize(SynthConfig(tmp_path, 4, 25, 80)))
    assert windows.shape == (100, 80) and windows.dtype == np.float32
    assert glucose.shape == (100,) and glucose.dtype == np.float32
    assert case_id.dtype == np.int32 and sorted(set(case_id)) == [0, 1, 2, 3]
    assert glucose.min() >= 10 and glucose.max() <= 1000


def test_meta_says_synth_and_counts_the_windows(tmp_path):
    meta = json.loads((synthesize(SynthConfig(tmp_path, 4, 25, 80)) / "meta.json").read_text())
    assert meta["source"] == "synth"
    assert meta["windows"] == 100 and meta["window_length"] == 80


def _synth(out, *flags) -> int:
    return main(["synth", "--out", str(out), "--cases", "3", "--windows-per-case", "2", *flags])


def test_synth_over_an_existing_dataset_is_refused_naming_force(tmp_path, capsys):
    assert _synth(tmp_path / "d", "--seed", "1") == 0
    before = (tmp_path / "d" / "windows.npy").read_bytes()
    capsys.readouterr()
    assert _synth(tmp_path / "d", "--seed", "2") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "already holds a dataset" in err and "--force" in err
    assert (tmp_path / "d" / "windows.npy").read_bytes() == before


def test_synth_with_force_replaces_the_dataset(tmp_path):
    assert _synth(tmp_path / "d", "--seed", "1") == 0
    before = (tmp_path / "d" / "windows.npy").read_bytes()
    assert _synth(tmp_path / "d", "--seed", "2", "--force") == 0
    assert (tmp_path / "d" / "windows.npy").read_bytes() != before
