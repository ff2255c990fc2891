"""Every Python snippet in README.md runs as written (on a CPU-only machine, the ones under a
heading that says they need a GPU are skipped there)."""
import re
from pathlib import Path

import pytest

from numbasparse.cuda.device import gpu_present

README = Path(__file__).parents[1] / "README.md"


def snippets():
    """(heading, code) of each ```python block, in order."""
    heading, found = "", []
    for block in re.split(r"^(#+ .*)$", README.read_text(), flags=re.M):
        if block.startswith("#"):
            heading = block
            continue
        found += [(heading, code) for code in re.findall(r"```python\n(.*?)```", block, flags=re.S)]
    return found


def test_readme_snippets_run_as_written():
    namespace = {}
    ran = 0
    for heading, code in snippets():
        if "needs a GPU" in heading and not gpu_present():
            continue
        if "import torch" in code:
            pytest.importorskip("torch")
        if "torch_geometric" in code:
            pytest.importorskip("torch_geometric")
        exec(compile(code, f"README.md ({heading.strip('# ')})", "exec"), namespace)
        ran += 1
    assert ran >= 3
