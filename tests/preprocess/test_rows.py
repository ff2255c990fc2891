"""Row bookkeeping of a pattern for kernels that split work by nonzeros (host only)."""
import numpy as np
import pytest
import scipy.sparse as sp

from numbasparse.preprocess import rows


def test_segment_rows_name_the_row_of_each_segments_first_entry():
    indptr = np.array([0, 0, 5, 12, 12, 16, 30])  # rows of 0, 5, 7, 0, 4, 14 entries
    assert rows.segment_rows(indptr, 8, np.int32).tolist() == [1, 2, 5, 5]  # entries 0, 8, 16, 24
    assert rows.segment_rows(indptr, 8, np.int64).dtype == np.int64


def test_rows_to_fill_lists_empty_rows_and_rows_crossing_blocks():
    indptr = np.array([0, 0, 5, 12, 12, 16, 30])  # rows of 0, 5, 7, 0, 4, 14 entries; blocks of 8
    assert rows.rows_to_fill(indptr, 8, np.int32).tolist() == [0, 2, 3, 5]  # row 1 in block 0, row 4 in block 1


def test_rows_to_fill_takes_blocks_at_given_starts():
    indptr = np.array([0, 0, 5, 12, 12, 16, 30])
    assert rows.rows_to_fill(indptr, np.array([0, 8, 16, 24]), np.int32).tolist() == [0, 2, 3, 5]
    assert rows.rows_to_fill(indptr, np.array([0, 12]), np.int32).tolist() == [0, 3]  # rows end at 12


@pytest.mark.parametrize("seed", range(20))
def test_balanced_segments_give_groups_equal_work_and_blocks_their_crossing_rows_chunks(seed):
    rng = np.random.default_rng(seed)
    lengths = rng.choice([0, 1, 2, 3, 40, 200], size=rng.integers(1, 300), p=[.2, .3, .2, .2, .07, .03])
    indptr = np.concatenate(([0], np.cumsum(lengths)))
    nnz = int(indptr[-1])
    blocks, block_groups = int(rng.integers(1, 9)), int(rng.choice([1, 4, 16]))
    groups = blocks * block_groups
    bounds = rows.balanced_segments(indptr, blocks, block_groups, 2)
    assert bounds.dtype == np.int64 and bounds.size == groups + 1 + 2 * blocks
    starts, heads, tails = bounds[:groups + 1], bounds[groups + 1:groups + 1 + blocks], bounds[groups + 1 + blocks:]
    assert starts[0] == 0 and starts[-1] == nnz and np.all(np.diff(starts) >= 0)
    filled = starts[:-1] < nnz
    assert np.all(np.diff(starts)[filled] >= 1)  # no empty group before the last entry
    row_ends = indptr[1:][lengths > 0] - 1
    work = [(b - a) + 2 * np.count_nonzero((row_ends >= a) & (row_ends < b)) for a, b in zip(starts[:-1], starts[1:])]
    target = (nnz + 2 * row_ends.size) / groups
    assert max(work) <= target + 1 + 2 + 1e-9  # equal but for an entry and its row end
    block_starts = starts[::block_groups]
    for b in range(blocks):  # the chunks of the rows crossing the block's bounds, counted one by one
        lo, hi = block_starts[b], block_starts[b + 1]
        if lo >= hi:
            continue
        chunk = lambda p: int(np.searchsorted(block_starts[:-1], p, side="right") - 1)  # noqa: E731
        head_row = int(np.searchsorted(indptr, lo, side="right") - 1)
        tail_row = int(np.searchsorted(indptr, hi - 1, side="right") - 1)
        assert heads[b] == (chunk(indptr[head_row]) if indptr[head_row] < lo else b)
        assert tails[b] == (chunk(indptr[tail_row + 1] - 1) if indptr[tail_row + 1] > hi else b)


def test_balanced_segments_of_a_pattern_without_entries_are_empty():
    bounds = rows.balanced_segments(np.array([0, 0, 0]), 2, 2, 4)
    assert bounds.tolist() == [0] * 5 + [0, 1] + [0, 1]


def test_empty_rows_per_group_and_crossing_span():
    indptr = np.array([0, 0, 0, 4, 4, 9, 9, 9, 9, 12, 12])  # empty rows at 0, 0, 4, 9, 9, 9, 12
    assert rows.empty_rows_per_group(indptr, 4) == 4  # groups [0,4) [4,8) [8,12): 2, 1, 3 + 1 after the end
    assert rows.empty_rows_per_group(indptr, 100) == 7
    assert rows.crossing_span(indptr, 4) == 1 and rows.crossing_span(indptr, 2) == 2
    assert rows.crossing_span(indptr, 12) == 0
    assert rows.empty_rows_per_group(np.array([0, 3, 5]), 2) == 0


def test_nonempty_rows_and_longest_first():
    indptr = np.array([0, 2, 2, 7, 8])
    assert rows.nonempty_rows(indptr) == 3
    assert rows.longest_first(indptr).tolist() == [2, 0, 3, 1]
    assert rows.longest_first(indptr, balance=False).tolist() == [0, 1, 2, 3]


def test_longest_empty_run_counts_consecutive_empty_rows():
    assert rows.longest_empty_run(np.array([0, 1, 2])) == 0
    assert rows.longest_empty_run(np.array([0, 0, 0, 1, 1, 2, 2, 2, 2])) == 3  # runs of 2, 1 and 3
    assert rows.longest_empty_run(np.array([0, 0, 0])) == 2
    assert rows.longest_empty_run(np.array([0])) == 0


@pytest.mark.parametrize("run", [1, 3, 100])
def test_row_runs_cover_each_row_once_in_runs_of_at_most_run_entries(run):
    indptr = np.array([0, 3, 3, 10, 11, 11])
    run_row, run_start, run_slot, split_rows, slot_ptr = rows.row_runs(indptr, run, np.int32)
    lengths = np.diff(indptr)
    for i in range(len(lengths)):
        starts = run_start[run_row == i]
        assert list(starts) == list(range(indptr[i], max(indptr[i + 1], indptr[i] + 1), run))
    cut = np.flatnonzero(np.maximum(1, -(-lengths // run)) > 1)
    assert list(split_rows) == list(cut)
    for r, i in enumerate(split_rows):  # a cut row's runs hold its slots, in order
        assert list(run_slot[run_row == i]) == list(range(slot_ptr[r], slot_ptr[r + 1]))
    assert (run_slot[~np.isin(run_row, cut)] == -1).all()


def test_sampled_entries_cover_small_patterns_whole_and_spread_runs_over_large_ones():
    assert rows.sampled_entries(0) == []
    assert rows.sampled_entries(500, runs=4, run=200) == [(0, 500)]
    runs = rows.sampled_entries(10_000, runs=4, run=100)
    assert [length for _, length in runs] == [100] * 4
    assert runs[0][0] == 0 and runs[-1][0] == 10_000 - 100


def test_median_column_distance_is_small_on_a_band_and_large_on_random_columns():
    n = 1000
    rng = np.random.default_rng(0)
    band = sp.diags([1.0, 1.0, 1.0], [-1, 0, 1], shape=(n, n), format="csr")
    random = sp.random(n, n, density=0.01, format="csr", random_state=1)
    for A, low, high in ((band, 0, 1), (random, n / 5, n / 2)):
        positions = np.sort(rng.choice(A.nnz, 200, replace=False))
        distance = rows.median_column_distance(A.indptr, positions, A.indices[positions])
        assert low <= distance <= high
    assert rows.median_column_distance(band.indptr, [], []) == 0.0


def test_grid_time_is_longest_where_the_costly_chunks_run_last():
    rng = np.random.default_rng(0)
    lengths = np.concatenate([np.full(3200, 16), np.full(51200, 1)])  # hubs, then single entries: 1600 blocks
    hubs_first = np.concatenate(([0], np.cumsum(lengths)))
    hubs_last = np.concatenate(([0], np.cumsum(lengths[::-1])))
    mixed = np.concatenate(([0], np.cumsum(rng.permutation(lengths))))
    blocks = 1600

    def time(indptr, stride=1):
        return rows.grid_time(rows.chunk_costs(indptr, 64, 2), 1000, stride)
    # a chunk of hubs costs 64 + 2 x 4, one of single entries 64 + 2 x 64: the costly ones run
    # last in hub order, and the grid waits on them
    assert time(hubs_first) > 1.1 * time(hubs_last)
    assert time(hubs_first, blocks - 1) < 0.9 * time(hubs_first)  # blocks reversed: short rows first
    assert time(mixed) < time(hubs_first)
    assert time(hubs_first, 989) <= time(hubs_first)  # a coprime stride: costly chunks in every wave, the last too
    assert time(mixed) >= 800 * (72 + 192) / 1000  # never below the mean load
    assert 192 <= rows.grid_time(rows.chunk_costs(hubs_first, 64, 2), 10 ** 6, 1) < 193  # every block at once:
    # the costliest
    assert rows.grid_time(rows.chunk_costs(np.array([0, 0, 0]), 64, 2), 10, 1) == 0.0  # no entries
    assert rows.grid_time(rows.chunk_costs(hubs_first, 64, 2), 1000, 1, mixed=True) < time(hubs_first)
    with pytest.raises(ValueError, match="coprime"):
        rows.grid_time(rows.chunk_costs(hubs_first, 64, 2), 1000, 5)


def test_shuffled_rows_reorder_rows_and_map_entries_and_rows_back():
    rng = np.random.default_rng(0)
    A = sp.random(60, 40, density=0.1, format="lil", random_state=rng)
    A[7:12] = 0  # a run of empty rows
    A = A.tocsr()
    indptr, remap = rows.shuffled_rows(A.indptr)
    order = remap[A.nnz:]
    assert sorted(order) == list(range(60)) and not np.array_equal(order, np.arange(60))
    entries = remap[:A.nnz]
    shuffled = sp.csr_matrix((A.data[entries], A.indices[entries], indptr), shape=A.shape)
    assert (shuffled != A[order]).nnz == 0
    again = rows.shuffled_rows(A.indptr)  # seeded: the same order in every process
    assert np.array_equal(again[0], indptr) and np.array_equal(again[1], remap)
