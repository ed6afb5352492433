"""`aka export OP --format flashinfer-bench`: gdn_prefill's real export, and a toy op's recorded timings.

The gdn_prefill export runs once per module through the real entry point (a subprocess, no TTY): it
makes the full set's inputs on the CPU to read their shapes (~15 s). Every record is parsed back with
aka's copy of FlashInfer-Bench's schema; where flashinfer-bench is installed, with its own models too.
"""

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from aka.contract.ops import get_op
from aka.evaluate.parent.outcomes import code_hash
from aka.interop import blob
from aka.interop.fib_export import ExportSettings, export
from aka.interop.fib_models import Definition, Solution, Trace

REPO = Path(__file__).resolve().parents[2]
TOY = REPO / "tests" / "support" / "toyop"


def aka(*args, cwd=REPO):
    code = "import sys; from aka.cli.main import main; sys.argv = ['aka', *sys.argv[1:]]; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=600, cwd=cwd,
                          stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def gdn(tmp_path_factory):
    # the project as it stands, without promoted kernels (this tree may hold one, which would then be
    # exported with its traces): what gets exported when nothing has been promoted yet
    out, proj = tmp_path_factory.mktemp("fib"), tmp_path_factory.mktemp("fibproj")
    for d in ("workloads", "wiki"):
        shutil.copytree(REPO / d, proj / d)
    shutil.copytree(REPO / "kernels", proj / "kernels", ignore=shutil.ignore_patterns("promoted.*", "__pycache__"))
    r = aka("export", "gdn_prefill", "--out", str(out), "--op-type", "gdn", cwd=proj)
    assert r.returncode == 0, r.stdout + r.stderr
    return out, r.stdout


def _lines(path: Path) -> list[str]:
    return [ln for ln in path.read_text().splitlines() if ln.strip()]


def test_gdn_definition_carries_the_interface(gdn):
    out, _ = gdn
    d = Definition.model_validate_json((out / "definitions/gdn/gdn_prefill.json").read_text())
    assert list(d.inputs) == ["q", "k", "v", "g", "beta", "cu_seqlens", "initial_state", "scale"]
    assert list(d.outputs) == ["o", "final_state"]
    assert d.inputs["q"].shape == ["T_total", "HK", "const_128"] and d.inputs["q"].dtype == "bfloat16"
    assert d.inputs["cu_seqlens"].shape == ["N_plus_1"] and d.inputs["cu_seqlens"].dtype == "int32"
    assert d.inputs["initial_state"].optional is True
    assert d.inputs["scale"].shape is None and d.inputs["scale"].dtype == "float32"  # a scalar, FIB-style
    assert d.axes["const_128"].type == "const" and d.axes["const_128"].value == 128
    assert {a for a, x in d.axes.items() if x.type == "var"} == {"T_total", "HK", "HV", "N_plus_1", "N"}
    assert d.constraints == ["N_plus_1 == N + 1"]
    assert "h   <- exp(g_t) * h" in d.description  # the contract's formula travels in the description
    raw = json.loads((out / "definitions/gdn/gdn_prefill.json").read_text())
    assert raw["inputs"]["scale"]["shape"] is None  # written, not left out: FIB's TensorSpec requires it


def test_gdn_workloads_are_the_full_set_with_index_tensors_by_value(gdn):
    out, _ = gdn
    op = get_op("gdn_prefill")
    cases = {c.id: c for c in op.cases("full")}
    manifest = json.loads((out / "aka/gdn_prefill.json").read_text())
    lines = _lines(out / "workloads/gdn/gdn_prefill.jsonl")
    assert len(lines) == len(cases) == 10
    for line in lines:
        t = Trace.model_validate_json(line)
        assert t.solution is None and t.evaluation is None  # a workload trace
        c = cases[manifest["cases"][t.workload.uuid]]
        n = len(c.seqlens)
        assert t.workload.axes == {"T_total": sum(c.seqlens), "HK": c.hk, "HV": c.hv, "N_plus_1": n + 1, "N": n}
        spec = t.workload.inputs["cu_seqlens"]
        assert spec.type == "safetensors" and spec.tensor_key == "cu_seqlens"
        cu = blob.load(out / spec.path)["cu_seqlens"]
        assert cu.dtype == torch.int32 and cu.tolist() == [0, *torch.tensor(c.seqlens).cumsum(0).tolist()]
        assert t.workload.inputs["q"].type == "random"
        assert ("initial_state" in t.workload.inputs) == c.initial_state  # absent where aka passes None
        assert "scale" not in t.workload.inputs  # default None: no value to give


def test_gdn_solution_is_the_baseline_without_traces_and_says_so(gdn):
    out, stdout = gdn
    src = get_op("gdn_prefill").path("baseline").read_text()  # the copy exported has no promoted kernel
    (path,) = (out / "solutions/gdn/gdn_prefill").glob("*.json")
    s = Solution.model_validate_json(path.read_text())
    assert s.name == f"aka_gdn_prefill_baseline_{code_hash(src)}" and s.definition == "gdn_prefill"
    assert s.spec.entry_point == "baseline.py::gdn_prefill" and s.spec.language == "triton"
    assert s.spec.destination_passing_style is False and s.sources[0].content == src
    assert not (out / "traces").exists()
    assert "traces      none (see the notes)" in stdout
    assert "no GPU measurement of this baseline source is recorded" in stdout
    assert "done in" in stdout


def test_gdn_exported_reference_runs_and_matches_ours(gdn):
    out, _ = gdn
    op = get_op("gdn_prefill")
    d = Definition.model_validate_json((out / "definitions/gdn/gdn_prefill.json").read_text())
    ns: dict = {}
    exec(compile(d.reference, "reference", "exec"), ns)  # what FlashInfer-Bench does with it
    case = op.cases("S2")[0]
    x = op.inputs.make_inputs(case, 1, "cpu")
    o, final = ns["run"](*(x.get(n) for n in list(d.inputs)))  # by position, scale None
    ref_o, ref_final = op.reference.reference(**x)
    assert o.dtype == torch.bfloat16 and final.dtype == torch.float32
    assert torch.equal(o, ref_o.to(torch.bfloat16)) and torch.equal(final, ref_final.to(torch.float32))


def test_gdn_export_validates_against_flashinfer_bench_models(gdn):
    pytest.importorskip("flashinfer_bench", reason="flashinfer-bench not installed (pip install 'aka[fib]'); "
                        "it pulls flashinfer and CUDA packages")
    from flashinfer_bench.data import Definition as FibDefinition
    from flashinfer_bench.data import Solution as FibSolution
    from flashinfer_bench.data import Trace as FibTrace

    out, stdout = gdn
    assert "validated against flashinfer-bench" in stdout
    FibDefinition.model_validate_json((out / "definitions/gdn/gdn_prefill.json").read_text())
    for p in (out / "solutions").rglob("*.json"):
        FibSolution.model_validate_json(p.read_text())
    for line in _lines(out / "workloads/gdn/gdn_prefill.jsonl"):
        assert FibTrace.model_validate_json(line).is_workload_trace()


# -- recorded measurements, on the toy op (the interpreter is not needed: nothing is timed) ------------

def _toy_project(tmp_path: Path, meta_hash: str | None = None) -> tuple[Path, str]:
    root = tmp_path / "proj"
    shutil.copytree(TOY, root)
    kdir = root / "kernels" / "scale_add"
    src = (kdir / "baseline.py").read_text().replace("BLOCK\": 128", "BLOCK\": 256")
    (kdir / "promoted.py").write_text(src)
    h = code_hash(src)
    meta = {"op": "scale_add", "run_id": "20261129-193311-962fd6", "attempt": 3, "code_hash": meta_hash or h,
            "times_us": {"F1": 12.5}, "timing": "graph", "host_us": {"F1": 9.0},
            "speedup_vs_baseline": {"F1": 1.25}, "device": "NVIDIA H200",
            "driver": "570.1", "cuda": "12.8", "torch": "2.8.0", "triton": "3.4.0", "python": "3.11.9",
            "gate": {"sets": ["smoke", "edge", "full"], "device": "NVIDIA H200",
                     "errors": {"F1": {"o": {"rel_l2": 1e-7, "plain_rel_l2": 2e-7}}}}}
    (kdir / "promoted.json").write_text(json.dumps(meta))
    commit = ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "promote"]
    for cmd in (["init", "-q"], ["add", "-A"], commit):
        subprocess.run(["git", *cmd], cwd=root, check=True, capture_output=True)

    def run(run_id, timing, device, us, rank_timing=None):
        d = root / "runs" / "scale_add" / run_id
        d.mkdir(parents=True)
        base = {"timing": timing, "baseline_us": {"F1": 20.0}, "incumbent_us": {"F1": us},
                "incumbent_gate": {"sets": ["smoke", "edge"], "ok": True}}
        (d / "run.json").write_text(json.dumps({
            "started": "2026-11-30T10:00:00", "incumbent": {"label": "promoted", "hash": h},
            "device": {"name": device, "interpreter": timing != "gpu", "torch": "2.9.0", "triton": "3.5.0"},
            "baseline": base | ({"rank_timing": rank_timing} if rank_timing else {})}))

    run("20261130-100000-aaaaaa", "gpu", "NVIDIA B200", 10.0, "graph")  # no gate ran on a B200: no errors
    run("20261130-110000-bbbbbb", "interpreter", "cpu (Triton interpreter)", 900.0)
    run("20261128-090000-cccccc", "gpu", "NVIDIA H200", 25.0)  # before rank_timing: eager, on a graph-timed device
    return root, h


def test_promoted_kernel_exports_its_graph_timing_and_gate_error_as_a_trace(tmp_path):
    root, h = _toy_project(tmp_path)
    op = get_op("scale_add", root)
    rep = export(op, ExportSettings(op="scale_add", out=tmp_path / "out"))
    assert rep.kernel == "promoted" and rep.solution == f"aka_scale_add_promoted_{h}" and rep.traces == 1
    (t,) = [Trace.model_validate_json(ln) for ln in _lines(tmp_path / "out" / rep.files["traces"])]
    h200 = t.evaluation
    assert h200.environment.hardware == "NVIDIA_H200" and t.workload.axes == {"N": 4096}
    assert h200.status == "PASSED" and h200.performance.latency_ms == pytest.approx(0.0125)  # the graph median
    assert h200.environment.libs == {"torch": "2.8.0", "triton": "3.4.0", "cuda": "12.8", "driver": "570.1",
                                     "python": "3.11.9"}
    commit_date = subprocess.run(["git", "log", "-1", "--format=%aI"], cwd=root, capture_output=True, text=True)
    assert h200.timestamp == commit_date.stdout.strip()  # the promotion commit's date, not the run's start
    assert h200.correctness.max_relative_error == pytest.approx(1e-7)  # the gate's rel L2, measured
    extra = h200.correctness.extra
    assert extra["aka_rel_l2"] == {"o": 1e-7} and extra["aka_case"] == "F1" and extra["aka_timing"] == "graph"
    assert extra["aka_host_us"] == 9.0 and "on NVIDIA H200" in extra["aka_errors_from"]
    assert h200.performance.speedup_factor == 0.0 and "1.250x aka's baseline" in h200.log
    first = h200.log.splitlines()[0]
    assert first.startswith("12.5 us, timing: graph") and "max_absolute_error: not measured" in h200.log
    raw = json.loads(_lines(tmp_path / "out" / rep.files["traces"])[0])
    assert "max_absolute_error" not in raw["evaluation"]["correctness"]  # not measured: not claimed
    assert "NaN" not in _lines(tmp_path / "out" / rep.files["traces"])[0]
    notes = "\n".join(rep.notes)
    assert "1 run(s) timed this kernel in the CPU interpreter only" in notes
    assert "no gate error figure for F1 on NVIDIA B200" in notes  # timed there, never gated there
    assert "eager timings on NVIDIA H200, which has graph timings of this code: left out" in notes


def test_eager_timings_are_named_and_borrow_the_gate_of_their_device_model(tmp_path):
    root, h = _toy_project(tmp_path)
    meta = json.loads((root / "kernels/scale_add/promoted.json").read_text())
    meta.pop("timing")  # a promotion recorded before the field: eager
    (root / "kernels/scale_add/promoted.json").write_text(json.dumps(meta))
    rep = export(get_op("scale_add", root), ExportSettings(op="scale_add", out=tmp_path / "out"))
    traces = [Trace.model_validate_json(ln) for ln in _lines(tmp_path / "out" / rep.files["traces"])]
    assert sorted(t.evaluation.performance.latency_ms for t in traces) == pytest.approx([0.0125, 0.025])
    for t in traces:
        assert "timing: eager" in t.evaluation.log.splitlines()[0]
        assert t.evaluation.correctness.extra["aka_timing"] == "eager"
        assert t.evaluation.correctness.max_relative_error == pytest.approx(1e-7)  # the H200 gate, same code
    assert rep.traces == 2 and any("B200" in n for n in rep.notes)


FIB_REPORT = ("import sys, flashinfer_bench.cli.main as m\n"
              "m.cli_config_logging = lambda args: m.configure_logging('INFO')\n"  # 0.1.2 logs reports at INFO
              "sys.argv = ['flashinfer-bench', *sys.argv[1:]]\nm.cli()")


def _fib(*args: str, script: bool = False) -> subprocess.CompletedProcess:
    """flashinfer-bench's own CLI: its console script as installed, or its cli() with INFO logging (0.1.2
    configures WARNING for `report`, so on success its report commands print nothing)."""
    cmd = [str(Path(sys.executable).parent / "flashinfer-bench")] if script else [sys.executable, "-c", FIB_REPORT]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)


def test_flashinfer_benchs_own_report_finds_the_exported_solution(tmp_path):
    pytest.importorskip("flashinfer_bench.cli.main", reason="flashinfer-bench's CLI does not import here "
                        "(pip install 'aka[fib]')")
    root, _ = _toy_project(tmp_path)
    out = tmp_path / "out"
    rep = export(get_op("scale_add", root), ExportSettings(op="scale_add", out=out))
    best = _fib("report", "best", "--local", str(out))
    assert best.returncode == 0, best.stderr
    assert "No valid solution found" not in best.stderr
    assert "Best solution for scale_add:" in best.stderr and f"- Solution: {rep.solution}" in best.stderr
    assert "rel=1.00e-07" in best.stderr and "timing: graph" in best.stderr  # its log snippet names the timing
    summary = _fib("report", "summary", "--local", str(out))
    assert summary.returncode == 0, summary.stderr
    line = next(ln for ln in summary.stderr.splitlines() if "'total'" in ln)
    stats = ast.literal_eval(line[line.index("{"):])
    assert stats["total"] == stats["passed"] == 1 and stats["avg_latency_ms"] == pytest.approx(0.0125)
    plain = _fib("report", "best", "--local", str(out), script=True)  # the console script, its own logging
    assert plain.returncode == 0 and "No valid solution found" not in plain.stderr + plain.stdout


def test_figures_of_another_kernel_are_not_exported(tmp_path):
    root, _ = _toy_project(tmp_path, meta_hash="0123456789abcdef")
    (root / "runs").rename(root / "runs.off")  # only promoted.json could speak for the kernel
    rep = export(get_op("scale_add", root), ExportSettings(op="scale_add", out=tmp_path / "out"))
    assert rep.traces == 0 and "traces" not in rep.files
    assert any("describes code 0123456789abcdef" in n for n in rep.notes)
    assert any("solution is written without traces" in n for n in rep.notes)


def test_toy_traces_validate_against_flashinfer_bench_models(tmp_path):
    pytest.importorskip("flashinfer_bench", reason="flashinfer-bench not installed (pip install 'aka[fib]'); "
                        "it pulls flashinfer and CUDA packages")
    from flashinfer_bench.data import Trace as FibTrace

    root, _ = _toy_project(tmp_path)
    rep = export(get_op("scale_add", root), ExportSettings(op="scale_add", out=tmp_path / "out"))
    assert rep.validation.startswith("every record validated")
    for line in _lines(tmp_path / "out" / rep.files["traces"]):
        assert FibTrace.model_validate_json(line).is_successful()


def test_unknown_format_is_one_line():
    r = aka("export", "gdn_prefill", "--format", "csv")
    assert r.returncode == 1 and r.stderr.strip() == "error: unknown format 'csv'; use --format flashinfer-bench"
