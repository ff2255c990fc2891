"""What the kernel-variant probes (``hp_wide.py``, ``sddmm_group.py``, ``spmm_variants.py``,
``slab_l2.py``, ``slab_veto.py``) share: graphs with random weights (every .npz graph of a folder), the check of each
variant's result, and checked, interleaved timing of variants against the rule's."""
import glob

import numpy as np
import scipy.sparse as sp


def weighted(A, rng):
    """(A, device CSR, torch CUDA CSR) of scipy CSR ``A`` given float32 weights drawn from
    [0.5, 1.5) (never all ones; A's own values are replaced)."""
    import torch

    from numbasparse.csr import CSR

    A.data = rng.uniform(0.5, 1.5, A.nnz).astype(np.float32)
    T = torch.sparse_csr_tensor(*(torch.from_numpy(a).cuda() for a in (A.indptr, A.indices, A.data)), A.shape)
    return A, CSR.from_scipy(A, dtype=np.float32), T


def weighted_graphs(folder, rng):
    """(name, scipy CSR, device CSR, torch CUDA CSR) per .npz graph in ``folder``, weighted as
    :func:`weighted` does."""
    for path in sorted(glob.glob(f"{folder}/*.npz")):
        yield (path.split("/")[-1][:-4], *weighted(sp.load_npz(path).tocsr(), rng))


def errors(variants, output, expected, skip=()):
    """{label: relative error} of the variants (but ``skip``) that missed ``expected`` by 1e-5 or
    more; each writes ``output``, poisoned with NaN first."""
    import torch

    bad = {}
    for label, fn in variants.items():
        if label not in skip:
            output.fill_(float("nan"))
            fn()
            err = float(torch.linalg.norm(output - expected) / torch.linalg.norm(expected))
            if not err < 1e-5:
                bad[label] = err
    return bad


def compare(variants, output, expected, baseline):
    """Check each variant but ``baseline`` (it writes ``output``, poisoned first, equal to
    ``expected`` within 1e-5), then time all interleaved, back to back; a printable summary:
    "rule=US others=US(rule/other) ... [BAD label:error ...]"."""
    from numbasparse.bench.timing import time_cuda_interleaved

    bad = [f"{label}:{err:.1e}" for label, err in errors(variants, output, expected, skip=(baseline,)).items()]
    times = {k: v[0] for k, v in time_cuda_interleaved(variants, calls=20, warmup=3, repeat=7).items()}
    rule = times["rule"]
    cells = " ".join(f"{k}={v * 1000:.1f}({rule / v:.2f})" for k, v in times.items() if k != "rule")
    return f"rule={rule * 1000:.1f}us {cells}" + (" BAD " + " ".join(bad) if bad else "")
