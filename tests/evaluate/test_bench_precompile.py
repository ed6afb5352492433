"""`aka bench` compiles the kernels' specialisations for every shape before the first timing, on a GPU only.

On a fresh H200 (2026-12-07) each shape with a new head layout or sequence count spent 26-72 s compiling inside
the timing; the harness now hands every kernel implementation's entry to aka.evaluate.precompile first.
Here: which implementations are compiled (one per module and CONFIG, never a competitor), that each one's own
entry is what gets recorded, that a failure costs only the head start, and that the CPU never does it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from aka.cli import bench as cli_bench
from aka.cli.main import app
from aka.evaluate.host import harness
from aka.evaluate.wire import BenchPayload, ImplRef, Precompiled

MODULE = """CONFIG = {"x": 1}


def entry(a):
    return (CONFIG["x"], a)
"""


def _ref(name, path, kind="kernel", config=None, graphed=False):
    return ImplRef(name=name, kind=kind, path=str(path), function="entry", config=config or {}, graphed=graphed)


def test_one_compile_per_module_and_config_and_none_for_competitors(tmp_path):
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    refs = [_ref("baseline", a), _ref("baseline@graph", a, graphed=True), _ref("baseline+x=2", a, config={"x": 2}),
            _ref("fla", b, kind="competitor"), _ref("other", b)]
    assert [r.name for r in harness.compiled_once(refs)] == ["baseline", "baseline+x=2", "other"]


def test_each_kernel_records_its_own_entry_on_every_case(tmp_path, monkeypatch):
    path = tmp_path / "k.py"
    path.write_text(MODULE)
    seen = []

    def ahead(call, cases, n, lock):
        seen.append(([call(c) for c in cases], n, lock))
        return Precompiled(specs=3, record_s=0.1, compiled=3, workers=n, seconds=1.0)

    monkeypatch.setattr("aka.evaluate.precompile.ahead", ahead)
    op = SimpleNamespace(inputs=SimpleNamespace(make_inputs=lambda case, seed, device: {"a": (case, seed, device)}))
    lines = harness.precompile_kernels(op, [_ref("base", path), _ref("base+x=7", path, config={"x": 7})],
                                       ["G1", "G2"], 16)
    assert seen == [([(1, ("G1", 0, "cuda")), (1, ("G2", 0, "cuda"))], 16, None),
                    ([(7, ("G1", 0, "cuda")), (7, ("G2", 0, "cuda"))], 16, None)]
    assert lines[0].startswith("precompile base: 3 of 3 specialisations compiled on 16 workers in ")
    assert lines[1].startswith("precompile base+x=7: 3 of 3")


@pytest.mark.parametrize("answer, expect", [
    (Precompiled(specs=2, record_s=0.1, tainted=["G1: ValueError: host read"]), "not done, recording raised (G1"),
    (Precompiled(specs=2, record_s=0.1, compiled=1, workers=2, failed=["_k: boom"], seconds=1.0),
     "1 of 2 specialisations compiled on 2 workers in"),
    (RuntimeError("no driver"), "skipped (RuntimeError: no driver)"),
])
def test_what_goes_wrong_is_a_note_and_the_bench_goes_on(tmp_path, monkeypatch, answer, expect):
    path = tmp_path / "k.py"
    path.write_text(MODULE)

    def ahead(call, cases, n, lock):
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr("aka.evaluate.precompile.ahead", ahead)
    op = SimpleNamespace(inputs=SimpleNamespace(make_inputs=lambda case, seed, device: {"a": 0}))
    [line] = harness.precompile_kernels(op, [_ref("base", path)], ["G1"], 2)
    assert line.startswith("precompile base: ") and expect in line
    if isinstance(answer, Precompiled) and answer.failed:
        assert "1+ failed (_k: boom)" in line


def test_the_interpreter_never_precompiles(monkeypatch):
    from aka.contract.ops import get_op
    from aka.evaluate.parent.impls import resolve

    def boom(*a, **k):
        raise AssertionError("precompiled on CPU")

    monkeypatch.setattr(harness, "precompile_kernels", boom)
    refs, _ = resolve(get_op("fa4_decode"), ["baseline"])
    payload = BenchPayload(op="fa4_decode", impls=refs, shapes="S1", force_cpu=True, precompile=8,
                           config={"warmup": 1, "min_iters": 1, "max_iters": 2, "input_copies": 1, "graph": False})
    res = harness.bench_host(payload)
    assert [r.shape for r in res.rows] == ["S1"] and not any("precompile" in n for n in res.notes)


@pytest.mark.parametrize("gpu, flag, want", [(True, [], 16), (True, ["--no-precompile"], None), (False, [], None)])
def test_the_cli_asks_for_it_on_a_gpu_unless_told_not_to(monkeypatch, gpu, flag, want):
    import torch
    from bench_values import bench_value

    got = {}

    def fake_worker(payload, timeout, total=None, lines=None):
        got["precompile"] = payload.precompile
        return bench_value([])

    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu)
    monkeypatch.setattr(cli_bench.os, "cpu_count", lambda: 16)
    monkeypatch.setattr(cli_bench, "run_worker", fake_worker)
    res = CliRunner().invoke(app, ["bench", "fa4_decode", "--impl", "baseline", "--shapes", "S1", *flag])
    assert res.exit_code == 0, res.output
    assert got["precompile"] == want
