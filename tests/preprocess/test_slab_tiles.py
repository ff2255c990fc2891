"""The column-slab tiling's tile size (host side of numbasparse.cuda.slab)."""
import numpy as np

from numbasparse.preprocess import slab_tiles
from numbasparse.preprocess.slab_tiles import MIN_FINISH_GAIN, _finish, balanced_tile_nnz


def test_a_wide_pattern_of_light_slabs_gets_smaller_tiles_that_fill_the_sms():
    # 8 slabs of 10_000 entries and 50 of 500 on 64 SMs: the bound (as if every slab ended in a
    # partial tile) leaves SMs idle; a smaller size keeps all of them busy.
    slab_nnz = np.array([10_000] * 8 + [500] * 50)
    bound = -(-slab_nnz.sum() // 32)
    size = balanced_tile_nnz(slab_nnz, smallest=-(-slab_nnz.sum() // 64), largest=bound, column_tiles=1, slots=64)
    assert size < bound
    assert _finish(slab_nnz, size, 1, 64) <= (1 - MIN_FINISH_GAIN) * _finish(slab_nnz, bound, 1, 64)


def test_the_bound_stays_where_a_smaller_tile_gains_too_little(monkeypatch):
    # 26 slabs on 16 SMs: tiles of 5388 entries would finish 2.2% before the bound's 9883
    slab_nnz = np.array([4356, 403, 1948, 794, 3558, 2610, 3741, 158, 3958, 5047, 3104, 4293, 429, 1496, 5440, 4616,
                         3199, 5845, 3504, 4734, 4935, 1748, 561, 3656, 626, 4304])
    assert balanced_tile_nnz(slab_nnz, smallest=4942, largest=9883, column_tiles=1, slots=16) == 9883
    monkeypatch.setattr(slab_tiles, "MIN_FINISH_GAIN", 0.0)  # without the margin the smaller size is taken
    assert balanced_tile_nnz(slab_nnz, smallest=4942, largest=9883, column_tiles=1, slots=16) < 9883


def test_the_size_stays_between_its_limits_and_an_empty_pattern_keeps_the_bound():
    rng = np.random.default_rng(0)
    for _ in range(50):
        slab_nnz = rng.integers(0, 5000, rng.integers(1, 40))
        total = max(1, int(slab_nnz.sum()))
        smallest, largest = -(-total // 128), -(-total // 40)
        size = balanced_tile_nnz(slab_nnz, smallest, largest, column_tiles=int(rng.integers(1, 3)), slots=64)
        assert min(smallest, largest) <= size <= largest
    assert balanced_tile_nnz(np.zeros(5, np.int64), smallest=1, largest=7, column_tiles=1, slots=64) == 7


def test_column_tiles_run_one_after_another_in_the_finishing_time():
    # two column tiles of 64 equal tiles on 64 SMs: two rounds
    assert _finish(np.array([6400]), 100, column_tiles=2, slots=64) == 200
