"""numpy range: the import check and pyproject.toml agree."""
import re
from pathlib import Path

import pytest

from numbasparse import _compat


def test_numpy_2_5_is_refused_with_advice():
    with pytest.raises(ImportError, match=r"pip install 'numpy<2\.5'"):
        _compat.check_numpy("2.5.0")


@pytest.mark.parametrize("version", ["1.26.4", "2.4.6", "2.0.0rc1"])
def test_supported_numpy_is_accepted(version):
    _compat.check_numpy(version)


def test_pyproject_declares_the_same_bound():
    text = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    bound = re.search(r'"numpy[^"]*<([\d.]+)"', text).group(1)
    assert tuple(int(p) for p in bound.split(".")) == _compat.NUMPY_UPPER
