"""Drive the real loop in its own process (for the SIGKILL test): scripted backend, fake evaluator.

usage: driver.py PROJECT STEPS.json DELAY_S [RUN_ID]   (prints 'run <id>' first, flushed)
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from fakes import FakeEvaluator  # noqa: E402

from aka.agent.llm.scripted import ScriptedBackend  # noqa: E402
from aka.contract.ops import get_op  # noqa: E402
from aka.run.loop import run_loop  # noqa: E402
from aka.run.setup import prepare_run  # noqa: E402
from aka.run.store import RunStore  # noqa: E402
from aka.settings import Budget, OptimizeSettings  # noqa: E402


def main() -> None:
    project, steps, delay = Path(sys.argv[1]), sys.argv[2], float(sys.argv[3])
    op = get_op("gdn_prefill", project)
    ev = FakeEvaluator(op, timing="gpu", delay_s=delay)
    if len(sys.argv) > 4:
        store = RunStore.open(project / "runs", sys.argv[4])
        settings = OptimizeSettings.model_validate(store.read_run().settings)
    else:
        settings = OptimizeSettings(op="gdn_prefill", budget=Budget(max_candidates=8), commit=True, prepare_ahead=3)
        store = prepare_run(project / "runs", settings, op, ev)
    print("run", store.run_id, flush=True)
    summary = run_loop(store, settings, op, ScriptedBackend(path=steps), ev)
    print("done", summary["attempts"], flush=True)


if __name__ == "__main__":
    main()
