"""The foundation commands as a user runs them: through the real entry point, in a subprocess."""

import subprocess
import sys

import pytest

from aka.contract.ops import op_names


def aka(*args, env=None):
    code = "import sys; from aka.cli.main import main; sys.argv = ['aka', *sys.argv[1:]]; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300,
                          env=env)


def test_ops_lists_every_contract():
    r = aka("ops")
    assert r.returncode == 0, r.stderr
    assert len(op_names()) >= 3  # the three operator lines at least: an empty list would prove nothing
    for name in op_names():  # every contract in workloads/
        assert name in r.stdout


@pytest.mark.parametrize("op,ids", [("gdn_prefill", [f"G{i}" for i in range(1, 11)]),
                                    ("fa4_prefill", [f"P{i}" for i in range(1, 31)]),
                                    ("fa4_decode", [f"D{i}-q{q}" for q in (1, 4) for i in range(1, 11)])])
def test_shapes_rows(op, ids):
    r = aka("shapes", op)
    assert r.returncode == 0, r.stderr
    rows = [line.split("│")[1].strip() for line in r.stdout.splitlines() if line.startswith("│")]
    assert [x for x in rows if x] == ids
    assert f"({len(ids)} shapes)" in r.stdout


def test_unknown_op_is_one_line_error():
    r = aka("shapes", "nope")
    assert r.returncode != 0
    assert r.stderr.strip().count("\n") == 0
    assert "unknown op 'nope'" in r.stderr and "gdn_prefill" in r.stderr


def test_doctor_reports_interpreter_and_hides_keys():
    import os

    env = {**os.environ, "OPENAI_API_KEY": "sk-test-secret-value"}
    r = aka("doctor", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "CPU only: Triton interpreter" in r.stdout and "runs a bf16" in r.stdout
    assert "OPENAI_API_KEY" in r.stdout and "sk-test-secret-value" not in r.stdout


def test_an_error_keeps_its_bracketed_text():
    # rich markup must not eat "[...]" in a message (issue 21: "pip install 'aka[llm]'" lost its extra)
    r = aka("shapes", "nope[llm]")
    assert r.returncode != 0 and "unknown op 'nope[llm]'" in r.stderr, r.stderr


def test_version_and_bracketed_defaults_in_help():
    import os

    assert aka("--version").stdout.strip().startswith("aka 0.")
    env = {**os.environ, "COLUMNS": "80"}

    def help_of(command):  # the help wraps at 78 columns whatever the terminal: texts are matched unwrapped
        return " ".join(aka(command, "--help", env=env).stdout.split())

    opt = help_of("optimize")
    assert "[default: 20; CPU: 3]" in opt and "[default: the config's, or the server's only one]" in opt
    assert "[default: inside runs/]" in help_of("report")
    assert "[default: full; CPU: smoke]" in help_of("bench")


@pytest.mark.parametrize("columns", ["80", None])  # COLUMNS=80, and unset with no TTY (rich then takes 80)
def test_shapes_fit_80_columns_with_every_parameter_and_note_whole(columns):
    import os

    from aka.contract.ops import get_op

    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"} | ({"COLUMNS": columns} if columns else {})
    r = aka("shapes", "gdn_prefill", "--set", "edge", env=env)
    assert r.returncode == 0, r.stderr
    assert max(len(line) for line in r.stdout.splitlines()) <= 80 and "…" not in r.stdout
    text = " ".join(r.stdout.split())  # wrapped lines joined: a note split across table cells does not read
    for case in get_op("gdn_prefill").cases("edge"):
        assert " ".join(case.note.split()) in text, case.note
    assert "initial_state=True" in r.stdout  # no parameter cut short


def test_ops_lists_the_good_contracts_and_names_the_malformed_one(tmp_path):
    import os
    import shutil
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    shutil.copytree(repo / "workloads", tmp_path / "workloads")
    shutil.copytree(repo / "kernels", tmp_path / "kernels")
    (tmp_path / "workloads" / "broken.yaml").write_text("name: broken\nshapes: [unclosed\n")
    r = aka("ops", env={**os.environ, "AKA_ROOT": str(tmp_path), "COLUMNS": "200"})
    assert r.returncode == 1
    for name in op_names():  # every contract in workloads/
        assert name in r.stdout
    assert r.stderr.strip().count("\n") == 0 and "broken.yaml" in r.stderr and "not valid YAML" in r.stderr


def test_doctor_reads_the_key_from_the_config_file_the_backends_read(tmp_path):
    import json
    import os

    cfg = tmp_path / "config.toml"
    cfg.write_text('[anthropic]\napi_key = "sk-ant-from-the-file"\n')
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")} | {"AKA_CONFIG": str(cfg)}
    r = aka("doctor", "--json", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    items = {i["item"]: i["value"] for i in json.loads(r.stdout)["items"]}
    assert items["anthropic key"] == f"set (api_key under [anthropic] in {cfg})"
    assert items["openai key"].startswith("not set (OPENAI_API_KEY or api_key under [openai]")
    assert "sk-ant-from-the-file" not in r.stdout
    table = aka("doctor", env=env | {"COLUMNS": "200"}).stdout
    assert f"set (api_key under [anthropic] in {cfg})" in table  # the [section] survives rich markup
