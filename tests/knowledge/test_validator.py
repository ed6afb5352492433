"""`aka wiki check`: the real wiki passes; broken pages fail with one line naming file and field."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner
from wiki_pages import GOOD_HARDWARE, GOOD_TECHNIQUE

from aka.cli.main import app
from aka.contract.ops import project_root
from aka.wiki import WikiError, check_wiki, load_wiki


def test_project_wiki_is_valid(known_ops):
    cards, problems = check_wiki(project_root() / "wiki", known_ops)
    assert problems == []
    kinds = [c.meta.kind for c in cards]
    assert kinds.count("technique") >= 15 and kinds.count("anti-pattern") >= 4
    assert {c.id for c in cards if c.meta.kind == "hardware"} >= {"h100", "h200", "b200", "a100", "l40s"}


def test_every_hardware_number_has_a_source(cards):
    for card in (c for c in cards if c.meta.kind == "hardware"):
        facts = card.meta.facts.present()
        assert "sm_count" in facts or card.id == "l40s"  # l40s: derived, still sourced
        for key, fact in facts.items():
            assert len(fact.source) >= 8, f"{card.id}.{key}"


def test_cli_check_passes():
    res = CliRunner().invoke(app, ["wiki", "check"])
    assert res.exit_code == 0, res.output
    assert "wiki OK" in res.output


def test_scratch_good_pages_pass(scratch):
    scratch("techniques/a-card.md", GOOD_TECHNIQUE.format(id="a-card"))
    scratch("hardware/part.md", GOOD_HARDWARE.format(id="part", name="NVIDIA Test"))
    cards, problems = scratch.check()
    assert problems == [] and len(cards) == 2


def test_hardware_fact_without_source_names_file_and_field(scratch):
    text = GOOD_HARDWARE.format(id="part", name="X").replace(
        '{value: 1000, source: "the datasheet, page 3"}', "{value: 1000}")
    path = scratch("hardware/part.md", text)
    _, problems = scratch.check()
    assert len(problems) == 1
    line = problems[0]
    assert "\n" not in line and str(path) in line and "facts.l2_bytes.source" in line


def test_quoted_measurement_without_sources_fails(scratch):
    scratch("techniques/a-card.md", GOOD_TECHNIQUE.format(id="a-card").replace('sources: ["a paper, 2024"]\n', ""))
    _, problems = scratch.check()
    assert len(problems) == 1 and "field 'sources'" in problems[0] and "12 us" in problems[0]


def test_duplicate_ids_fail(scratch):
    scratch("techniques/a-card.md", GOOD_TECHNIQUE.format(id="a-card"))
    scratch("anti-patterns/a-card.md", GOOD_TECHNIQUE.format(id="a-card").replace("technique", "anti-pattern"))
    _, problems = scratch.check()
    assert any("duplicate id 'a-card'" in p for p in problems)


@pytest.mark.parametrize(
    "rel, text, expect",
    [
        ("techniques/other.md", GOOD_TECHNIQUE.format(id="a-card"), "field 'id': expected 'other'"),
        ("anti-patterns/a-card.md", GOOD_TECHNIQUE.format(id="a-card"), "belongs in wiki/techniques/"),
        ("techniques/a-card.md", GOOD_TECHNIQUE.format(id="a-card").replace("tags:", "colour: red\ntags:"),
         "field 'colour'"),
        ("techniques/a-card.md", GOOD_TECHNIQUE.format(id="a-card").replace("tags: [demo]", "ops: [nope]"),
         "unknown op 'nope'"),
        ("techniques/a-card.md", GOOD_TECHNIQUE.format(id="a-card").replace("tags: [demo]", "arch: [hopper]"),
         "not of the form sm_90"),
        ("hardware/part.md", GOOD_HARDWARE.format(id="part", name="X").split("facts:")[0] + "---\n",
         "needs names, capability, facts"),
        ("techniques/a-card.md", "no front matter\n", "must start with a '---'"),
    ],
    ids=["id-not-filename", "wrong-folder", "unknown-field", "unknown-op", "bad-arch", "hw-no-facts", "no-fm"],
)
def test_broken_pages(scratch, rel, text, expect):
    scratch(rel, text)
    _, problems = scratch.check()
    assert len(problems) >= 1 and expect in problems[0], problems


def test_load_wiki_raises_one_line(scratch):
    scratch("techniques/a-card.md", GOOD_TECHNIQUE.format(id="b-card"))
    with pytest.raises(WikiError) as err:
        load_wiki(scratch.root)
    assert "\n" not in str(err.value) and "a-card.md" in str(err.value)
