"""`aka import DEFINITION.json`: FlashInfer-Bench's public GDN prefill definition, a malformed one, and a
round trip through `aka export`. The judge of every draft is aka's own contract loader (aka/contract/spec.py)."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from aka.contract.ops import get_op
from aka.contract.spec import load_contract
from aka.interop.fib_export import ExportSettings, export
from aka.interop.fib_import import ImportProblems, ImportSettings, draft

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data"
GDN = DATA / "gdn_prefill_qk16_v32_d128_k_last.json"  # public, see data/SOURCES.md
GDN_WL = DATA / "gdn_prefill_qk16_v32_d128_k_last.workloads.jsonl"  # hand-written for these tests


def aka(*args, cwd=REPO):
    code = "import sys; from aka.cli.main import main; sys.argv = ['aka', *sys.argv[1:]]; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300, cwd=cwd,
                          stdin=subprocess.DEVNULL)


def test_the_public_definition_alone_names_its_one_missing_field(tmp_path):
    out = tmp_path / "gdn_prefill_qk16_v32_d128_k_last.yaml"
    r = aka("import", str(GDN), "--out", str(out))
    assert r.returncode == 1 and not out.exists()
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 2, r.stderr  # the field, then the one-line summary
    assert "field 'workloads': a definition holds no shapes" in lines[0] and "--workloads FILE.jsonl" in lines[0]
    assert lines[1].startswith("error: ") and "1 field(s) cannot be mapped" in lines[1]


def test_the_public_definition_with_workloads_drafts_a_contract_aka_loads(tmp_path):
    out = tmp_path / "gdn_prefill_qk16_v32_d128_k_last.yaml"
    r = aka("import", str(GDN), "--workloads", str(GDN_WL), "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "3 full-set case(s)" in r.stdout and "aka's contract loader accepts the draft" in r.stdout
    assert "1 workload(s) with the axes of an earlier one" in r.stdout and "done in" in r.stdout
    c = load_contract(out)
    spec = c.spec
    assert [t.name for t in spec.interface.inputs] == ["q", "k", "v", "state", "A_log", "a", "dt_bias", "b",
                                                       "cu_seqlens"]
    assert spec.interface.inputs[0].shape == "[total_seq_len, 16, 128]"  # const axes by value
    assert spec.interface.inputs[3].optional and spec.interface.inputs[8].dtype == "int64"
    assert [(s.name, s.type, s.default) for s in spec.interface.scalars] == [("scale", "float", None)]
    assert spec.output_names() == ["output", "new_state"] and set(spec.tolerances) == {"output", "new_state"}
    assert set(spec.case_params) == {"total_seq_len", "num_seqs", "len_cu_seqlens"}
    assert [(x.id, x.total_seq_len, x.num_seqs) for x in c.cases("full")] == [("W1", 8192, 1), ("W2", 8192, 4),
                                                                              ("W3", 1024, 2)]
    assert c.cases("smoke")[0].total_seq_len == 1024  # the smallest workload stands in, marked DRAFT
    assert "def run(q, k, v, state, A_log, a, dt_bias, b, cu_seqlens, scale):" in spec.formula
    assert "len_cu_seqlens == num_seqs + 1" in spec.formula
    text = out.read_text()
    assert text.count("# DRAFT") >= 4 and "op_type: gdn" in text
    # an existing contract is never overwritten without --force
    again = aka("import", str(GDN), "--workloads", str(GDN_WL), "--out", str(out))
    assert again.returncode == 1 and "exists; pass --force" in again.stderr
    assert aka("import", str(GDN), "--workloads", str(GDN_WL), "--out", str(out), "--force").returncode == 0


def _malformed(tmp_path: Path) -> Path:
    d = json.loads(GDN.read_text())
    d["name"] = "GDN-prefill"  # no aka op name
    d["axes"]["head_size"]["value"] = -1  # FIB's schema: non-negative
    d["inputs"]["q"]["dtype"] = "float128"  # no such dtype anywhere
    d["inputs"]["state"]["dtype"] = "float8_e4m3fn"  # valid in FIB, no aka dtype
    d["outputs"]["output"]["shape"] = ["total_seq_len", "nope"]  # an undefined axis
    d["outputs"]["new_state"]["shape"] = None  # a scalar output
    del d["reference"]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(d))
    return path


def test_a_malformed_definition_gives_one_line_per_bad_field(tmp_path):
    path = _malformed(tmp_path)
    with pytest.raises(ImportProblems) as err:
        draft(ImportSettings(definition=path, workloads=GDN_WL), tmp_path)
    fields = [line.split("field '")[1].split("'")[0] for line in err.value.lines]
    assert sorted(fields) == sorted(["axes.head_size.value", "inputs.q.dtype", "reference", "name",
                                     "inputs.state.dtype", "outputs.output.shape", "outputs.new_state.shape"])
    assert all(line.startswith(f"{path}: field '") for line in err.value.lines)
    text = "\n".join(err.value.lines)
    assert "float8_e4m3fn has no aka dtype" in text and "axis 'nope' is not in axes" in text
    assert "pass --name NAME" in text and "a scalar output" in text
    r = aka("import", str(path), "--workloads", str(GDN_WL), "--out", str(tmp_path))  # a folder: the name is its own
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == len(fields) + 1
    assert "7 field(s) cannot be mapped" in r.stderr


def test_out_is_a_folder_or_a_file_whose_name_names_the_op(tmp_path):
    from typer.testing import CliRunner

    from aka.cli.main import app
    from aka.errors import AkaError

    # a folder: the contract is <the definition's name>.yaml in it
    d, out = draft(ImportSettings(definition=GDN, workloads=GDN_WL, out=tmp_path / "drafts"), tmp_path)
    assert d.name == GDN.stem and out == tmp_path / "drafts" / f"{GDN.stem}.yaml"
    # a file with another name: that name is the op's, as --name would make it (aka's loader wants <op>.yaml)
    d, out = draft(ImportSettings(definition=GDN, workloads=GDN_WL, out=tmp_path / "my_gdn.yaml"), tmp_path)
    assert d.name == "my_gdn" and out == tmp_path / "my_gdn.yaml"
    out.write_text(d.text)
    assert load_contract(out).spec.name == "my_gdn"
    # what cannot work says so in one line, with the fix
    for settings, says in (
        (dict(out=tmp_path / "my_gdn.yaml", name="gdn_copy"), f"--out {tmp_path / 'my_gdn.yaml'} would hold op my_gdn "
         f"but --name says gdn_copy: pass --out {tmp_path / 'gdn_copy.yaml'} or --out {tmp_path}"),
        (dict(out=tmp_path / "My-GDN.yaml"), "not an aka op name (lowercase letters, digits and _); name the file "
         "e.g. my_gdn.yaml"),
        (dict(out=tmp_path / "my_gdn.yml"), f"pass --out {tmp_path / 'my_gdn.yaml'} or a folder"),
    ):
        with pytest.raises(AkaError) as err:
            draft(ImportSettings(definition=GDN, workloads=GDN_WL, **settings), tmp_path)
        assert says in str(err.value) and "\n" not in str(err.value)
    # through the command: --out a folder that does not exist yet
    res = CliRunner().invoke(app, ["import", str(GDN), "--workloads", str(GDN_WL), "--out", str(tmp_path / "new")],
                             env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    assert (tmp_path / "new" / f"{GDN.stem}.yaml").is_file()
    assert f"-> {tmp_path / 'new' / GDN.stem}.yaml: 3 full-set case(s)" in res.stdout


def test_bad_workload_lines_are_listed_too(tmp_path):
    wl = tmp_path / "wl.jsonl"
    good = GDN_WL.read_text().splitlines()[0]
    bad_axes = json.loads(good)
    bad_axes["workload"]["axes"] = {"total_seq_len": 10}
    wl.write_text("\n".join([good, json.dumps(bad_axes), '{"definition": "gdn_prefill_qk16_v32_d128_k_last"}']))
    with pytest.raises(ImportProblems) as err:
        draft(ImportSettings(definition=GDN, workloads=wl), tmp_path)
    assert len(err.value.lines) == 2
    assert f"{wl}:2: field 'workload.axes': no value for var axes ['num_seqs', 'len_cu_seqlens']" in err.value.lines[0]
    assert f"{wl}:3: field 'workload': Field required" in err.value.lines[1]


def test_round_trip_through_export(tmp_path):
    # the toy op out to a TraceSet and back: its workloads are found beside the definition
    root = tmp_path / "proj"
    shutil.copytree(REPO / "tests" / "support" / "toyop", root)
    rep = export(get_op("scale_add", root), ExportSettings(op="scale_add", out=tmp_path / "fib"))
    d, out = draft(ImportSettings(definition=tmp_path / "fib" / rep.files["definition"], name="scale_add_rt"), root)
    assert out == root / "workloads" / "scale_add_rt.yaml" and d.workloads_file.name == "scale_add.jsonl"
    out.write_text(d.text)
    back = load_contract(out)
    assert [t.name for t in back.spec.interface.inputs] == ["x", "y"] and back.spec.output_names() == ["o"]
    assert back.spec.interface.inputs[0].shape == "[N]" and back.spec.interface.inputs[0].dtype == "float32"
    assert [c.N for c in back.cases("full")] == [c.n for c in get_op("scale_add", root).cases("full")]


def test_import_validates_against_flashinfer_bench_models(tmp_path):
    pytest.importorskip("flashinfer_bench", reason="flashinfer-bench not installed (pip install 'aka[fib]'); "
                        "it pulls flashinfer and CUDA packages")
    d, _ = draft(ImportSettings(definition=GDN, workloads=GDN_WL, out=tmp_path / f"{GDN.stem}.yaml"), tmp_path)
    assert d.validation == "definition validated against flashinfer-bench's models"


def test_shapes_of_an_imported_op_names_the_missing_cost_model(tmp_path):
    root = tmp_path / "proj"
    shutil.copytree(REPO / "tests" / "support" / "toyop", root)
    assert aka("import", str(GDN), "--workloads", str(GDN_WL), "--name", "gdn_copy", cwd=root).returncode == 0
    r = aka("shapes", "gdn_copy", cwd=root)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == ["error: kernels/gdn_copy/model.py is missing: write the op's cost model "
                                             "(flops(case), min_bytes(case)); see kernels/scale_add/model.py"]
    (root / "kernels" / "gdn_copy").mkdir()
    (root / "kernels" / "gdn_copy" / "model.py").write_text("def flops(case):\n    return 1.0\n")
    r = aka("shapes", "gdn_copy", cwd=root)
    assert r.returncode == 1 and r.stderr.startswith("error: kernels/gdn_copy/model.py defines no min_bytes(): ")
