"""promoted.json as one typed record (aka.records.Promoted): files written by earlier versions read
back and write out unchanged; a field this version cannot type is dropped, not fatal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aka.records import Promoted

ROOT = Path(__file__).resolve().parents[2]
WRITTEN_BEFORE = sorted([*ROOT.glob("kernels/*/promoted.json"), *ROOT.glob("tests/run/data/*/promoted.json")])


def test_there_are_old_records_to_read():
    assert len(WRITTEN_BEFORE) >= 2, WRITTEN_BEFORE


@pytest.mark.parametrize("path", WRITTEN_BEFORE, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_record_written_before_reads_back_and_round_trips(path):
    meta = Promoted.parse(path.read_text())
    assert meta is not None and meta.code_hash and meta.times_us
    assert meta.gate is not None and meta.gate.passed
    assert json.loads(meta.to_json()) == json.loads(path.read_text())


def test_a_field_of_the_wrong_type_is_dropped_and_the_rest_stays():
    meta = Promoted.parse(json.dumps({"code_hash": "ab", "attempt": "third", "times_us": {"G1": 3.0},
                                      "note_from_a_later_version": [1, 2]}))
    assert meta is not None and meta.code_hash == "ab" and meta.attempt is None and meta.times_us == {"G1": 3.0}
    kept = {"code_hash": "ab", "times_us": {"G1": 3.0}, "note_from_a_later_version": [1, 2]}
    assert json.loads(meta.to_json()) == kept


@pytest.mark.parametrize("text", ["", "[1, 2]", "{not json", "null"])
def test_what_is_not_a_record_reads_as_none(text):
    assert Promoted.parse(text) is None


def test_a_record_without_timing_predates_graph_timing():
    assert Promoted.parse('{"code_hash": "ab"}').timing == "eager"
