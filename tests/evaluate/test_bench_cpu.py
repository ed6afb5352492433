"""The harness on CPU: interpreter labels, skip notes, competitor correctness and the CLI table."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from aka.cli.main import app
from aka.contract.ops import get_op
from aka.evaluate.checker.verify import bench_worker
from aka.evaluate.host.bench import is_gpu_timing
from aka.evaluate.host.loader import prepare
from aka.evaluate.parent.impls import ImplError, resolve
from aka.evaluate.wire import BenchPayload, Ceilings

REPO = Path(__file__).resolve().parents[2]
FAST = {"warmup": 1, "min_iters": 1, "max_iters": 2, "input_copies": 1, "graph": False}


def _payload(op, names, shapes):
    refs, skipped = resolve(get_op(op), names)
    return BenchPayload(op=op, impls=refs, shapes=shapes, config=FAST, force_cpu=True), skipped


def test_interpreter_run_is_labelled_and_never_a_gpu_timing():
    payload, _ = _payload("gdn_prefill", ["baseline"], "S1")
    res = bench_worker(payload).model_dump()  # as it reaches the parent
    cell = res["rows"][0]["results"]["baseline"]
    assert res["kind"] == "interpreter" and res["ceilings"] is None
    assert cell["eager"]["kind"] == "interpreter" and not is_gpu_timing(cell["eager"])
    assert cell["eager"]["median_us"] > 0 and cell["roofline_frac"] is None
    assert any("not representative" in n for n in res["notes"])


def test_missing_fla_and_promoted_are_skipped_with_notes(tmp_path):
    pytest.importorskip("torch")
    try:
        import fla  # noqa: F401

        pytest.skip("fla is installed here")
    except ImportError:
        pass
    # a project whose fa4_decode has no promoted kernel (this repository's has one since 2026-12-03)
    shutil.copytree(REPO / "workloads", tmp_path / "workloads")
    shutil.copytree(REPO / "kernels" / "fa4_decode", tmp_path / "kernels" / "fa4_decode",
                    ignore=shutil.ignore_patterns("promoted.*", "__pycache__"))
    _, skipped = resolve(get_op("fa4_decode", tmp_path), ["baseline", "promoted"])
    assert [s.name for s in skipped] == ["promoted"] and "promoted.py" in skipped[0].note
    payload, skipped = _payload("gdn_prefill", ["baseline", "fla"], "S1")
    assert not skipped
    fla_cell = bench_worker(payload).rows[0].results["fla"].model_dump()
    assert "fla not importable" in fla_cell["skipped"]


def test_unknown_impl_is_a_one_line_error():
    with pytest.raises(ImplError, match="unknown implementation 'flash'.*baseline, promoted, fla"):
        resolve(get_op("gdn_prefill"), ["flash"])


def test_repeated_impl_gets_a_distinct_label():
    refs, _ = resolve(get_op("gdn_prefill"), ["baseline", "baseline"])
    assert [r.name for r in refs] == ["baseline", "baseline#2"] and refs[0].path == refs[1].path


def test_a_kernel_with_config_values_is_its_own_implementation():
    """baseline+KEY=VALUE: parsed as the type of the value it replaces, run in a module of its own."""
    op = get_op("fa4_decode")
    names = ["baseline", "baseline+BLOCK_N=32+LAZY_RESCALE=true", "baseline+SPLIT_POLICY=target"]
    refs, _ = resolve(op, names)
    assert [r.name for r in refs] == names and refs[2].config == {"SPLIT_POLICY": "target"}
    assert refs[0].config == {} and refs[1].config == {"BLOCK_N": 32, "LAZY_RESCALE": True}
    case = op.cases("S1")[0]
    inputs = op.inputs.make_inputs(case, 0, "cpu")
    want = op.reference.reference(**inputs)[0]
    plain, variant = prepare(refs[0], inputs), prepare(refs[1], inputs)
    for call in (plain, variant):
        out = call().double()
        assert ((out - want).norm() / want.norm()).item() < 1e-2
    from aka.evaluate.host.loader import module_of, variant_of

    assert module_of(refs[0].path).CONFIG["BLOCK_N"] == 64  # the plain module keeps its value
    assert variant_of(refs[1].path, refs[1].config).CONFIG["BLOCK_N"] == 32


def test_graph_suffix_wraps_a_kernel_in_aka_graphed(tmp_path):
    """baseline@graph: the same kernel called through aka.graphed, labelled apart; on CPU it runs eagerly."""
    op = get_op("fa4_decode")
    names = ["baseline", "baseline@graph", "baseline+BLOCK_N=32@graph", "baseline@bound"]
    refs, _ = resolve(op, names)
    assert [r.name for r in refs] == names and [r.graphed for r in refs] == [False, True, True, True]
    assert [r.bound for r in refs] == [False, False, False, True]
    assert refs[2].config == {"BLOCK_N": 32}
    inputs = op.inputs.make_inputs(op.cases("S1")[0], 0, "cpu")
    want = op.reference.reference(**inputs)[0]
    for ref in (refs[1], refs[3]):
        call = prepare(ref, inputs)
        for _ in range(3):
            assert ((call().double() - want).norm() / want.norm()).item() < 1e-2
    with pytest.raises(ImplError, match="unknown implementation 'baseline@eager'.*ending in '@graph' or '@bound'"):
        resolve(op, ["baseline@eager"])
    odd = tmp_path / "v@2" / "mine.py"  # an '@' inside a path is not the suffix
    odd.parent.mkdir()
    odd.write_text(op.path("baseline").read_text())
    (plain, wrapped), _ = resolve(op, [str(odd), f"{odd}@graph"])
    assert (plain.name, plain.graphed, wrapped.name, wrapped.graphed) == ("mine", False, "mine@graph", True)
    with pytest.raises(ImplError, match="wraps aka's kernels, not the competitor 'sdpa'"):
        resolve(op, ["sdpa@graph"])


@pytest.mark.parametrize("name,error", [
    ("baseline+BLOCK=32", r"no CONFIG key 'BLOCK'; its keys: .*BLOCK_N"),
    ("baseline+BLOCK_N", r"'BLOCK_N' is not KEY=VALUE"),
    ("baseline+BLOCK_N=wide", r"BLOCK_N=wide: the current value 64 is a int"),
    ("baseline+LAZY_RESCALE=1", r"LAZY_RESCALE=1: the current value is False; write true or false"),
    ("sdpa+BLOCK_N=32", r"CONFIG values apply to aka's kernels, not to the competitor 'sdpa'"),
])
def test_config_values_that_cannot_apply_are_one_line_errors(name, error):
    with pytest.raises(ImplError, match=error):
        resolve(get_op("fa4_decode"), [name])


@pytest.mark.parametrize("op,shapes", [("fa4_prefill", ["S2", "E3", "E4"]), ("fa4_decode", ["S1", "S2", "E3"])])
def test_sdpa_competitor_computes_the_op(op, shapes):
    """A competitor timed beside our kernels must compute the same function (float64 reference)."""
    o = get_op(op)
    (ref,), _ = resolve(o, ["sdpa"])
    for case in o.cases(",".join(shapes)):
        inputs = o.inputs.make_inputs(case, 0, "cpu")
        call = prepare(ref, inputs)
        out = call().double()
        want = o.reference.reference(**inputs)[0]
        err = ((out - want).norm() / want.norm()).item()
        assert err < 1e-2, f"{op} {case.id}: rel L2 {err:.2e}"
        assert "gather untimed" in call.note


def test_cli_prints_the_labelled_table_and_writes_files(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("CLI CPU-label test needs a machine without a GPU")
    out_json, out_csv = tmp_path / "r.json", tmp_path / "r.csv"
    res = CliRunner().invoke(app, ["bench", "fa4_decode", "--impl", "baseline,sdpa", "--shapes", "S1",
                                   "--json", str(out_json), "--csv", str(out_csv), "--time-cap", "7.5"],
                           terminal_width=200)
    assert res.exit_code == 0, res.output
    assert "interpreter, not representative" in res.output
    assert "geomean" in res.output and "sdpa µs" in res.output
    # the progress line of the finished shape, labelled too (printed before the table arrives)
    line = next(x for x in res.output.splitlines() if x.strip().startswith("S1 ") and "baseline" in x)
    assert "sdpa" in line and "interpreter, not representative" in line
    data = json.loads(out_json.read_text())
    assert data["config"]["time_cap_s"] == 7.5  # --time-cap reached the worker
    kinds = {n: r["eager"]["kind"] for n, r in data["rows"][0]["results"].items()}
    assert kinds == {"baseline": "interpreter", "sdpa": "cpu"}
    assert out_csv.read_text().splitlines()[0].startswith("shape,impl,kind,median_us")


def test_cli_names_a_skipped_competitor():
    try:
        import fla  # noqa: F401

        pytest.skip("fla is installed here")
    except ImportError:
        pass
    res = CliRunner().invoke(app, ["bench", "gdn_prefill", "--impl", "baseline,fla", "--shapes", "E1"],
                             terminal_width=200)
    assert res.exit_code == 0, res.output
    assert "fla: skipped: ImportError: fla not importable" in res.output


def test_cli_bad_shape_set_fails_in_one_line():
    res = CliRunner().invoke(app, ["bench", "gdn_prefill", "--shapes", "nope"])
    assert res.exit_code != 0 and "unknown shape set or id" in str(res.exception)


def test_the_harness_takes_its_ceilings_from_the_checker_and_never_calibrates():
    """The calibration must not run beside the candidate (a patched timer would poison its cache)."""
    import aka.evaluate.checker.calibrate
    from aka.evaluate.host.harness import bench_host

    payload, _ = _payload("fa4_decode", ["baseline"], "S1")
    payload = payload.model_copy(update={"ceilings": Ceilings(device="x", driver="y", copy_tbps=1.0,
                                                              gemm_tflops=1.0)})
    calibrate = aka.evaluate.checker.calibrate
    original, calibrate.ceilings = calibrate.ceilings, None  # calling it here would raise
    try:
        res = bench_host(payload).model_dump()
    finally:
        calibrate.ceilings = original
    assert res["ceilings"]["copy_tbps"] == 1.0 and res["rows"][0]["floor_us"] > 0


def test_speedups_can_be_taken_on_graph_replay_times():
    from bench_values import bench_value

    from aka.cli.bench import speedups

    def cell(e, g):
        return {"eager": {"median_us": e, "kind": "gpu-eager"}, "graph": {"median_us": g, "kind": "gpu-graph"}}

    rows = bench_value([{"shape": "G1", "results": {"aka": cell(900.0, 800.0), "fla": cell(750.0, 400.0)}}]).rows
    assert speedups(rows, ["aka", "fla"])["fla"] == [900.0 / 750.0]
    assert speedups(rows, ["aka", "fla"], "graph")["fla"] == [2.0]


def test_speedup_basis_is_checked_in_one_line():
    runner = CliRunner()
    res = runner.invoke(app, ["bench", "fa4_decode", "--speedup", "wall"])
    assert res.exit_code != 0 and "--speedup wall: use eager or graph" in str(res.exception)
    res = runner.invoke(app, ["bench", "fa4_decode", "--speedup", "graph", "--no-graph"])
    assert res.exit_code != 0 and "drop --no-graph" in str(res.exception)


def test_cli_on_cpu_defaults_to_the_smoke_set_and_says_so():
    if torch.cuda.is_available():
        pytest.skip("the CPU default needs a machine without a GPU")
    res = CliRunner().invoke(app, ["bench", "fa4_decode", "--impl", "sdpa", "--time-cap", "0.05"], terminal_width=200)
    assert res.exit_code == 0, res.output
    assert "timing the smoke set" in res.output
    shown = {x.split()[0] for x in res.output.splitlines() if x.strip().startswith(("S1 ", "S2 "))}
    assert shown and not any(x.strip().startswith(("D1", "E1")) for x in res.output.splitlines())
