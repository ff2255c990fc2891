"""The benchmark harness: arguments, generators, byte counting, reports (on the CPU); one whole run on a GPU."""
import json

import numpy as np
import pytest
import scipy.sparse as sp

from numbasparse import graphs
from numbasparse.bench import harness, report
from numbasparse.bench.__main__ import parse_args


def test_defaults_cover_the_issue_grid():
    args = parse_args([])
    assert args.n == [32, 64, 128, 256] and args.ops == ["spmm", "sddmm"] and args.repeat >= 20
    assert "torch_csr32" in args.baselines and "pyg_scatter" in args.baselines


def test_lists_are_parsed():
    args = parse_args(["--n", "32,64", "--baselines", "none", "--reduce", "sum,max",
                       "--sampled", "rmat:10", "--sampled-nodes", "100,200"])
    assert args.n == [32, 64] and args.baselines == [] and args.reduce == ["sum", "max"]
    assert args.sampled_nodes == [100, 200]


@pytest.mark.parametrize("argv", [["--baselines", "mkl"], ["--ops", "gemm"], ["--reduce", "prod"],
                                  ["--n", "0"], ["--sampled-nodes", "5"]])
def test_bad_arguments_are_refused(argv):
    with pytest.raises(SystemExit):
        parse_args(argv)


def test_compulsory_bytes_counts_csr_inputs_and_output_once():
    A = sp.csr_matrix(np.ones((3, 5), np.float32))  # nnz 15
    csr = 4 * 4 + 15 * (4 + 4)
    assert harness.compulsory_bytes(A, "spmm", 8, "float32") == csr + (5 * 8 + 3 * 8) * 4
    assert harness.compulsory_bytes(A, "sddmm", 8, "float64") == 4 * 4 + 15 * 12 + (3 + 5) * 8 * 8 + 15 * 8
    assert harness.flops(A, "spmm", 8) == 2 * 15 * 8


def test_l2_rotation_only_for_small_inputs():
    small = harness.Case("g", sp.identity(100, format="csr"), "spmm", "sum", 32)
    large = harness.Case("g", sp.identity(10**6, format="csr"), "spmm", "sum", 256)
    assert harness.l2_copies(small, 50 << 20) == 8
    assert harness.l2_copies(large, 50 << 20) == 1


def test_metrics_and_speedups():
    rows = [dict(graph="g", op="spmm", reduce="sum", n=32, impl="torch_csr32", ms=2.0, bytes=4e6, flops=1e6),
            dict(graph="g", op="spmm", reduce="sum", n=32, impl="ns:hp", ms=1.0, bytes=4e6, flops=1e6),
            dict(graph="g", op="spmm", reduce="sum", n=32, impl="cupyx", status="skipped: no cupy")]
    harness.add_metrics(rows, copy_gbs=2000.0, yardstick={"spmm": "torch_csr32"})
    assert rows[1]["speedup"] == 2.0 and rows[0]["speedup"] == 1.0
    assert rows[1]["floor_ms"] == pytest.approx(4e6 / 2000e6)
    assert rows[1]["gbs"] == pytest.approx(4.0)
    assert "speedup" not in rows[2]
    (g, lo, n), = [v for k, v in report.geomean_speedups(rows).items() if k[1] == "ns:hp"]
    assert (g, lo, n) == (2.0, 2.0, 1)


def test_reports_are_written(tmp_path):
    rows = [dict(graph="g", nnz=5, op="spmm", reduce="sum", n=32, impl="ns:hp", ms=1.0, floor_ms=0.5,
                 speedup=1.5, status="ok")]
    assert "ns:hp" in report.table(rows) and report.markdown(rows).startswith("| graph")
    report.write_json(tmp_path / "r.json", {"gpu": "x"}, rows)
    assert json.loads((tmp_path / "r.json").read_text())["rows"][0]["ms"] == 1.0
    assert "ns:hp ms" in report.compact_markdown(rows, {"spmm": "torch_csr32"})


def test_report_recomputes_speedups_against_another_yardstick(tmp_path, capsys):
    rows = [dict(graph="g", nnz=5, op="spmm", reduce="sum", n=32, impl=impl, ms=ms, bytes=4e6, flops=1e6,
                 dtype="bfloat16", status="ok")
            for impl, ms in (("torch_csr32", 2.0), ("torch_csr32_f32", 3.0), ("ns:auto", 1.0))]
    meta = {"gpu": "x", "date": "d", "copy_gbs": 2000.0, "command": "c"}
    report.write_json(tmp_path / "r.json", meta, harness.add_metrics(rows, 2000.0, {"spmm": "torch_csr32"}))
    report.main([str(tmp_path / "r.json"), "--yardstick", "spmm=torch_csr32_f32"])
    out = capsys.readouterr().out
    assert "torch_csr32_f32 for spmm" in out
    assert [line.split()[2] for line in out.splitlines() if line.startswith("spmm   ns:auto")] == ["3.000"]


def test_sampled_subgraphs_are_induced_and_sized():
    A = graphs.rmat(12, 8)
    subs = graphs.sample_subgraphs(A, 3, 100, 300, seed=1)
    assert len(subs) == 3
    for S in subs:
        assert 100 <= S.shape[0] <= 300 and S.shape[0] == S.shape[1]
        assert (S != S.T).nnz == 0
    again = graphs.sample_subgraphs(A, 3, 100, 300, seed=1)
    assert all((a != b).nnz == 0 for a, b in zip(subs, again))


def test_bench_without_gpu_says_so(capsys):
    from numbasparse.bench.__main__ import main
    from numbasparse import dispatch

    if dispatch.gpu_present():
        pytest.skip("a GPU is present")
    assert main(["--graphs", "rmat:6"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


def test_reorder_variants_and_payoff():
    from numbasparse.bench.__main__ import load_graphs

    args = parse_args(["--graphs", "rmat:8", "--reorder", "none,louvain,loa"])
    found, prep = load_graphs(args)
    assert set(found) == {"rmat:8", "rmat:8+louvain", "rmat:8+loa"} and set(prep) == {"rmat:8+louvain", "rmat:8+loa"}
    assert all(found[k].nnz == found["rmat:8"].nnz for k in found)
    rows = [dict(graph="g", op="spmm", reduce="sum", n=32, impl="ns:hp", ms=2.0),
            dict(graph="g+loa", op="spmm", reduce="sum", n=32, impl="ns:hp", ms=1.5),
            dict(graph="g+louvain", op="spmm", reduce="sum", n=32, impl="ns:hp", ms=2.5)]
    harness.add_payoff(rows, {"g+loa": 0.01, "g+louvain": 0.02})
    assert rows[1]["payoff_calls"] == pytest.approx(20.0)
    assert rows[2]["payoff_calls"] == float("inf")
    with pytest.raises(SystemExit):
        parse_args(["--reorder", "rcm"])


def test_graphs_get_random_values_unless_their_own_are_asked_for():
    """Never all ones by default (a kernel that ignored A's values would pass the check): random
    in [0.5, 1.5), the same for a graph's name in every run; the pattern unchanged."""
    from numbasparse.bench.__main__ import load_graphs

    (A,) = load_graphs(parse_args(["--graphs", "rmat:8"]))[0].values()
    (again,) = load_graphs(parse_args(["--graphs", "rmat:8"]))[0].values()
    (own,) = load_graphs(parse_args(["--graphs", "rmat:8", "--values", "graph"]))[0].values()
    assert np.all(own.data == 1) and 0.5 <= A.data.min() and A.data.max() < 1.5 and len(np.unique(A.data)) > 1
    assert np.array_equal(A.data, again.data)
    assert np.array_equal(A.indptr, own.indptr) and np.array_equal(A.indices, own.indices)
    assert A.dtype == own.dtype
    # reordered copies: the order from the graph's own values, the random values permuted with it
    found, _ = load_graphs(parse_args(["--graphs", "rmat:8", "--reorder", "none,louvain"]))
    own_order, _ = load_graphs(parse_args(["--graphs", "rmat:8", "--reorder", "none,louvain", "--values", "graph"]))
    reordered, plain = found["rmat:8+louvain"], own_order["rmat:8+louvain"]
    assert np.array_equal(reordered.indptr, plain.indptr) and np.array_equal(reordered.indices, plain.indices)
    assert np.isclose(np.sort(reordered.data), np.sort(found["rmat:8"].data)).all()


def test_gcn_case_counts_x_w_and_output():
    A = sp.csr_matrix(np.ones((3, 5), np.float32))
    csr = 4 * 4 + 15 * (4 + 4)
    out = harness.GCN_OUT
    assert harness.compulsory_bytes(A, "gcn", 8, "float32") == csr + (5 * 8 + 8 * out + 3 * out) * 4
    assert harness.flops(A, "gcn", 8) == 2 * 15 * 8 + 2 * 3 * 8 * out
    assert parse_args(["--ops", "gcn"]).ops == ["gcn"]


def test_fused_only_applies_to_gcn_and_hc_only_to_sum():
    assert harness.applies("ns:fused", "gcn") and not harness.applies("ns:fused", "spmm")
    assert harness.applies("ns:hp", "gcn") and harness.applies("torch_csr32", "gcn")
    assert "ns:fused" in harness.implementations(["hp"], [])
    with pytest.raises(harness.Unsupported):
        harness.numbasparse_impl("hc")(sp.identity(3, format="csr"), "spmm", "max", "float32")


def test_fused_score_ops_compare_fused_unfused_and_scatter():
    for op in ("sddmm_spmm", "attention"):
        assert harness.applies("ns:fused", op) and harness.applies("ns:unfused", op)
        assert harness.applies("pyg_scatter", op) and not harness.applies("ns:hp", op)
    assert not harness.applies("ns:unfused", "spmm")
    A = sp.csr_matrix(np.ones((3, 5), np.float32))
    assert harness.compulsory_bytes(A, "attention", 8, "float32") == 4 * 4 + 15 * 8 + (2 * 3 * 8 + 2 * 5 * 8) * 4
    assert parse_args(["--ops", "sddmm_spmm,attention"]).ops == ["sddmm_spmm", "attention"]


@pytest.mark.gpu
def test_bench_times_every_checked_implementation_on_a_gpu(tmp_path):
    from numbasparse.bench.__main__ import main

    out = tmp_path / "rows.json"
    assert main(["--graphs", "rmat:7", "--ops", "spmm", "--n", "32", "--algorithms", "auto,hp",
                 "--baselines", "torch_csr32", "--repeat", "3", "--warmup", "1", "--kernel-time",
                 "--sampled", "rmat:10", "--sampled-count", "3", "--sampled-nodes", "50,100",
                 "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert {(r["graph"], r["impl"]) for r in rows} == {
        (g, i) for g in ("rmat:7", "sampled(rmat:10,3)") for i in ("ns:auto", "ns:hp", "torch_csr32")}
    for r in rows:
        assert r["status"] == "ok" and r["error"] < 1e-5
        assert r["ms"] > 0 and r["b2b_ms"] > 0 and r["kernel_ms"] > 0


def test_a_tf32_implementation_is_spmm_or_the_fused_layer_with_that_precision_and_its_tolerance():
    assert harness.applies("ns:hc@tf32", "spmm") and harness.tolerance("ns:hc@tf32", "float32") == 2.0**-9
    assert harness.applies("ns:fused@tf32", "gcn") and harness.tolerance("ns:fused@tf32", "float32") == 2.0**-9
    assert harness.tolerance("ns:hc", "float32") == harness.TOLERANCE["float32"]
    with pytest.raises(harness.Unsupported, match="precision='tf32' is an option of spmm and of the fused GCN"):
        harness.numbasparse_impl("hc@tf32")(sp.identity(3, format="csr"), "sddmm", "-", "float32")
    with pytest.raises(harness.Unsupported, match="precision='tf32' is an option of spmm and of the fused GCN"):
        harness.numbasparse_impl("hp@tf32")(sp.identity(3, format="csr"), "gcn", "sum", "float32")
