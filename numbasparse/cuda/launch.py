"""Launch-configuration rules shared by the CUDA kernels: one place for each number."""
from numba import cuda

WARP_SIZE = 32
#: Warps per thread block for the row-per-warp kernels (CRC, CWM, SDDMM warp-per-row).
ROW_WARPS_PER_BLOCK = 4


def cdiv(a, b):
    return -(-a // b)


def row_warp_grid(n_rows, n_cols, cols_per_warp):
    """(grid, block) for kernels with one warp per (row, tile of ``cols_per_warp`` columns).

    blockIdx.x picks ROW_WARPS_PER_BLOCK consecutive rows, blockIdx.y the column tile.
    """
    grid = (cdiv(n_rows, ROW_WARPS_PER_BLOCK), max(1, cdiv(n_cols, cols_per_warp)))
    return grid, ROW_WARPS_PER_BLOCK * WARP_SIZE


def sm_count():
    """Number of streaming multiprocessors of the current device (1 on the simulator)."""
    device = cuda.get_current_device()
    return int(getattr(device, "MULTIPROCESSOR_COUNT", 1))
