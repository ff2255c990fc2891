"""``python -m numbasparse demo`` runs, checks and prints a table."""
import scipy.sparse as sp

from numbasparse import graphs
from numbasparse.__main__ import main


def test_demo_on_a_data_directory(tmp_path, capsys):
    sp.save_npz(tmp_path / "tiny.npz", graphs.rmat(8, 4))
    assert main(["demo", "--data", str(tmp_path), "--n", "7"]) == 0
    out = capsys.readouterr().out
    assert "tiny" in out and "checks passed" in out


def test_demo_refuses_missing_directory(tmp_path, capsys):
    import pytest

    with pytest.raises(SystemExit):
        main(["demo", "--data", str(tmp_path / "nope")])
