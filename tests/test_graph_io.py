"""weights.npz (graph_io.write_weights / read_weights): every array comes back with its dtype and
values, the archive is the same bytes every time, and archives of earlier saves still load."""

from __future__ import annotations

import zipfile

import numpy as np

from aieflow.graph_io import NARROWED, read_weights, write_weights

ARRAYS = {
    "0/weight_q": np.array([[-128, 127], [0, -1]], dtype=np.int64),  # int8 range
    "0/bias_q": np.array([-(2**15), 2**15 - 1], dtype=np.int64),  # int16 range
    "1/weight_q": np.array([-(2**31), 2**31 - 1], dtype=np.int64),  # int32 range
    "1/bias_q": np.array([2**31, -5], dtype=np.int64),  # wider than int32: kept int64
    "2/weight_q": np.zeros((0, 3), dtype=np.int64),
    "0/weight": np.array([[0.5, -1.25], [3.0, 1e-8]], dtype=np.float32),
    "2/table": np.array([1, 2, 3], dtype=np.int32),  # not int64: stored as it is
}


def _same(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and np.array_equal(a[k], b[k]), k


def test_round_trip_keeps_dtypes_and_values_and_stores_codes_narrow(tmp_path):
    write_weights(tmp_path / "w.npz", ARRAYS)
    _same(read_weights(tmp_path / "w.npz"), ARRAYS)
    with zipfile.ZipFile(tmp_path / "w.npz") as z:
        names = {i.filename: i for i in z.infolist()}
    assert all(i.compress_type == zipfile.ZIP_STORED for i in names.values())
    narrowed = {n.removesuffix(".npy").removesuffix(NARROWED) for n in names if n.endswith(NARROWED + ".npy")}
    assert narrowed == {"0/weight_q", "0/bias_q", "1/weight_q"}


def test_the_archive_is_the_same_bytes_every_time(tmp_path):
    write_weights(tmp_path / "a.npz", ARRAYS)
    write_weights(tmp_path / "b.npz", dict(reversed(ARRAYS.items())))
    assert (tmp_path / "a.npz").read_bytes() == (tmp_path / "b.npz").read_bytes()


def test_archives_of_earlier_saves_still_load(tmp_path):
    np.savez_compressed(tmp_path / "deflated.npz", **ARRAYS)  # deflated, wide codes
    _same(read_weights(tmp_path / "deflated.npz"), ARRAYS)
