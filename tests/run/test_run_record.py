"""run.json as one typed record (aka.records.RunRecord): a run written by an earlier version reads back
and writes out unchanged; a run.json that is not a record is one clear error."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from aka.records import RunRecord, RunRecordError, read_run_record

OLD = Path(__file__).parent / "data" / "run_3efb49c"


def test_a_run_written_before_reads_back_typed_and_round_trips(tmp_path):
    run = read_run_record(OLD)
    assert run.op == "gdn_prefill" and run.status == "finished" and run.device.name
    assert run.baseline.baseline_us and run.baseline.incumbent_gate is not None and run.baseline.incumbent_gate.ok
    assert run.baseline.rank_timing is None  # recorded before the field: readers take it as eager
    assert [p.n for p in run.promotions] == [0, 2] and run.incumbent.hash
    assert json.loads(run.to_json()) == json.loads((OLD / "run.json").read_text())


def test_update_keeps_what_it_does_not_touch(tmp_path):
    from aka.run.store import RunStore

    shutil.copytree(OLD, tmp_path / "gdn_prefill" / "20261202-133138-287ad4")
    store = RunStore.open(tmp_path, "20261202-133138-287ad4")
    before = json.loads((store.path / "run.json").read_text())
    store.update_run(status="interrupted", later_field={"kept": True})
    after = json.loads((store.path / "run.json").read_text())
    assert after == {**before, "status": "interrupted", "later_field": {"kept": True}}
    store.close()


@pytest.mark.parametrize("text,why", [("{not json", "Invalid JSON"), ('{"promotions": "all"}', "promotions")])
def test_a_run_json_that_is_no_record_is_one_clear_error(tmp_path, text, why):
    (tmp_path / "run.json").write_text(text)
    with pytest.raises(RunRecordError, match=f"run.json is not a run record .*{why}"):
        read_run_record(tmp_path)
    with pytest.raises(RunRecordError, match="run directory is incomplete"):
        read_run_record(tmp_path / "missing")


def test_a_fresh_record_has_the_defaults_readers_expect():
    run = RunRecord()
    assert run.device.name == "" and run.baseline.incumbent_us == {} and run.incumbent.label == "incumbent"
    assert json.loads(run.to_json()) == {}
