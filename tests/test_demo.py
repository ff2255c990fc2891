"""``python -m numbasparse demo`` runs, checks and prints a table."""
import pytest
import scipy.sparse as sp

from numbasparse import graphs
from numbasparse.__main__ import main


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_demo_on_a_data_directory(tmp_path, capsys, dtype):
    sp.save_npz(tmp_path / "tiny.npz", graphs.rmat(8, 4))
    assert main(["demo", "--data", str(tmp_path), "--n", "7", "--dtype", dtype]) == 0
    out = capsys.readouterr().out
    assert "tiny" in out and "checks passed" in out and f"dtype={dtype}" in out


def test_demo_refuses_missing_directory(tmp_path, capsys):
    import pytest

    with pytest.raises(SystemExit):
        main(["demo", "--data", str(tmp_path / "nope")])


def test_compile_without_a_gpu_says_so(capsys):
    """``python -m numbasparse compile`` needs a real GPU: elsewhere (the simulator too) it exits 1
    with the reason, compiling nothing."""
    from numbasparse.cuda.device import gpu_present

    if gpu_present():
        pytest.skip("a GPU is present: compile would run (tests/cuda/test_launch.py covers it)")
    assert main(["compile", "--n", "8"]) == 1
    assert "needs a CUDA GPU" in capsys.readouterr().err


def test_compile_refuses_bad_widths():
    with pytest.raises(SystemExit):
        main(["compile", "--n", "0,x"])
