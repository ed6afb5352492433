"""Edit answers (issue 19, part 1): SEARCH/REPLACE blocks applied to the module they were written
against, over the real SDK clients and the fake servers; a block that does not apply is repaired."""

from __future__ import annotations

import json

import pytest
from fake_servers import user_text
from llm_helpers import backend, policy_verify

from aka.agent.llm.base import Context
from aka.agent.llm.chat import read_exchanges
from aka.agent.llm.edits import Edit, EditError, apply_edits, parse_edits
from aka.contract.ops import get_op
from aka.records import Plan


def block(search: str, replace: str) -> str:
    return f"<<<<<<< SEARCH\n{search}=======\n{replace}>>>>>>> REPLACE\n"


SRC = 'CONFIG = {\n    "BV": 64,\n    "warps": 8,\n}\n\n\ndef f():\n    return CONFIG["BV"]\n'


def test_blocks_apply_in_order_each_to_the_result_of_the_last():
    text = ("Two changes.\n" + block('    "BV": 64,\n', '    "BV": 32,\n')
            + block('    "BV": 32,\n    "warps": 8,\n', '    "BV": 32,\n    "warps": 4,\n'))
    edits = parse_edits(text)
    assert edits == [Edit('    "BV": 64,\n', '    "BV": 32,\n'),
                     Edit('    "BV": 32,\n    "warps": 8,\n', '    "BV": 32,\n    "warps": 4,\n')]
    assert apply_edits(SRC, edits) == SRC.replace("64", "32").replace("8,", "4,")


def test_an_answer_without_blocks_has_no_edits_and_a_broken_block_is_an_error():
    assert parse_edits("```python\nx = 1\n```") == []
    with pytest.raises(EditError, match="1 SEARCH marker"):
        parse_edits('<<<<<<< SEARCH\n    "BV": 64,\n=======\n    "BV": 32,\n')  # cut before REPLACE


@pytest.mark.parametrize("search,why", [('    "BV": 128,\n', "is not in the module"),
                                        ('    "', "occurs 2 times"), ("   \n", "empty SEARCH")])
def test_a_search_text_must_occur_exactly_once(search, why):
    with pytest.raises(EditError, match=why):
        apply_edits(SRC, [Edit('    "BV": 64,\n', '    "BV": 32,\n'), Edit(search, "x")])
    with pytest.raises(EditError, match="edit 2 of 2"):
        apply_edits(SRC, [Edit('    "BV": 64,\n', '    "BV": 32,\n'), Edit(search, "x")])


def test_whitespace_counts():
    with pytest.raises(EditError, match="whitespace included"):
        apply_edits(SRC, [Edit('  "BV": 64,\n', '  "BV": 32,\n')])  # two spaces short


# ---------------------------------------------------------------------------------------------
# gdn_prefill, the module whose whole-module answers cost ~9.8k output tokens


@pytest.fixture
def gdn():
    return get_op("gdn_prefill")


def gdn_context(op, tmp_path, verify=None):
    run_dir = tmp_path / "runs" / "gdn_prefill" / "r1"
    (run_dir / "candidates").mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"baseline": {"timing": "interpreter", "incumbent_us": {}}}))
    source = op.path("baseline").read_text()
    return source, Context(op=op.name, attempt=0, incumbent_source=source, incumbent_label="baseline",
                           baseline_path=str(op.path("baseline")), kernel_dir=str(op.path("baseline").parent),
                           hardware={"name": "cpu (Triton interpreter)", "interpreter": True},
                           run_dir=str(run_dir), verify=verify)


PLAN = {"hypothesis": "BVA 64 -> 32: twice the programs for the segment kernel"}
_LINE = next(ln for ln in get_op("gdn_prefill").path("baseline").read_text().splitlines()
             if ln.startswith('    "BVA": 64,'))
OLD, NEW = _LINE, _LINE.replace('"BVA": 64,', '"BVA": 32,')  # the whole line, its comment included


def test_a_one_value_change_as_an_edit_costs_a_fraction_of_the_whole_module(kind, server, gdn, tmp_path,
                                                                             monkeypatch):
    source, ctx = gdn_context(gdn, tmp_path)
    assert source.count(OLD) == 1
    whole = source.replace(OLD, NEW)
    server.add("```python\n" + whole + "```", "One value.\n\n" + block(OLD + "\n", NEW + "\n"))
    be = backend(kind, server, gdn, monkeypatch)
    src_whole, u_whole = be.candidate(Plan(**PLAN), ctx)
    src_edit, u_edit = be.candidate(Plan(**PLAN), ctx)
    assert src_edit == src_whole == whole  # the same candidate either way
    assert u_edit.output_tokens <= 1500 < 5000 < u_whole.output_tokens, (u_edit.output_tokens, u_whole.output_tokens)
    codegen = user_text(server.requests[0]["messages"][-1])
    assert "<<<<<<< SEARCH" in codegen and "exactly once" in codegen  # the prompt offers the form


def test_an_edit_that_does_not_apply_goes_to_the_repair_turn_with_its_reason(kind, server, gdn, tmp_path,
                                                                           monkeypatch):
    source, ctx = gdn_context(gdn, tmp_path, verify=policy_verify(gdn))
    server.add(block(OLD.replace('"BVA": 64', '"BVA":  64') + "\n", NEW + "\n"),  # one space too many
               block(OLD + "\n", NEW + "\n"))
    src, usage = backend(kind, server, gdn, monkeypatch, repairs=2).candidate(Plan(**PLAN), ctx)
    assert src == source.replace(OLD, NEW) and len(server.requests) == 2
    repair = user_text(server.requests[1]["messages"][-1])
    assert "failed the edit stage" in repair and "is not in the module" in repair and "repair 1 of 2" in repair
    assert [e["stage"] for e in read_exchanges(tmp_path / "runs" / "gdn_prefill" / "r1")] == [
        "codegen", "repair"]


def test_repairs_edit_the_candidate_not_the_incumbent(kind, server, gdn, tmp_path, monkeypatch):
    source, ctx = gdn_context(gdn, tmp_path, verify=policy_verify(gdn))
    broken = NEW.replace('"BVA": 32,', '"BVA": 32,,')  # a syntax error
    server.add(block(OLD + "\n", broken + "\n"),
               block(broken + "\n", NEW + "\n"))  # fixed against the candidate's own text, not the incumbent's
    src, _ = backend(kind, server, gdn, monkeypatch, repairs=2).candidate(Plan(**PLAN), ctx)
    assert src == source.replace(OLD, NEW)
    assert "failed the check stage" in user_text(server.requests[1]["messages"][-1])


def test_an_edit_still_broken_after_the_last_repair_fails_the_attempt(kind, server, gdn, tmp_path, monkeypatch):
    from aka.agent.llm.base import AttemptFailed

    _, ctx = gdn_context(gdn, tmp_path, verify=policy_verify(gdn))
    server.add(block("no such line\n", "x\n"), block("no such line\n", "x\n"))
    with pytest.raises(AttemptFailed) as err:
        backend(kind, server, gdn, monkeypatch, repairs=1).candidate(Plan(**PLAN), ctx)
    assert err.value.stage == "codegen" and "is not in the module" in str(err.value)
