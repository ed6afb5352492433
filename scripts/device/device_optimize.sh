#!/usr/bin/env bash
# Issue 7 on the H200, one device call (< 10 min; 2026-11-29: 40 candidates in 480 s of loop): `aka optimize gdn_prefill --budget 40` with the offline
# backend, in a throwaway git repository made from this working tree, so a promotion commits there and
# never here. Prints the trajectory (one line per candidate) and the summary; $OUT receives run.json,
# attempts.jsonl, the promoted kernel + promoted.json and a `git format-patch` of every promotion commit
# (apply it to the real repository with `git am` if the lead wants to keep the kernel).
# Usage (device, repo root): bash scripts/device/device_optimize.sh
#   env: OP (gdn_prefill), BUDGET (40), MAX_TIME (loop seconds incl. set-up, 530), CAP (hard wall cap, 570), COMPETITORS (0), PROFILE (0),
#        GATE_ROUNDS (2: the gate's minimum; the full set's float64 references dominate a promotion), EXTRA,
#        RESUME (1: continue the last run of the scratch repository, made by the previous call while the
#        machine stayed warm; BUDGET and MAX_TIME are then the run's new totals: 2026-12-01, ~25 s per
#        gdn_prefill candidate, so 30 candidates need two calls)
set -o pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
[ -d .whl ] && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 FLA_FLASH_QLA=0
unset TRITON_INTERPRET
OUT=${OUT:-/tmp/optimize_out}; mkdir -p "$OUT"
OP=${OP:-gdn_prefill}; BUDGET=${BUDGET:-40}; MAX_TIME=${MAX_TIME:-530}; CAP=${CAP:-570}; ROUNDS=${GATE_ROUNDS:-2}
SCRATCH=/tmp/aka_optimize_repo
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader | tee "$OUT/env.txt"
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)' | tee -a "$OUT/env.txt"

if [ "${RESUME:-0}" = 1 ] && [ -d "$SCRATCH/.git" ]; then
  LAST=$(ls -d "$SCRATCH/runs/$OP"/*/ 2>/dev/null | tail -1)
  [ -n "$LAST" ] || { echo "RESUME=1 but no run in $SCRATCH (the machine went cold?)"; exit 2; }
else
  rm -rf "$SCRATCH"; mkdir -p "$SCRATCH"
  cp -r workloads kernels "$SCRATCH/"
  rm -f "$SCRATCH/kernels/$OP/promoted.py" "$SCRATCH/kernels/$OP/promoted.json"  # start from the baseline
  (cd "$SCRATCH" && printf '/runs/\n__pycache__/\n' > .gitignore && git init -q && git add -A \
    && git -c user.email=aka@device -c user.name=aka commit -qm "scratch copy of $OP") || exit 1
fi
export AKA_ROOT=$SCRATCH GIT_AUTHOR_NAME=aka GIT_AUTHOR_EMAIL=aka@device GIT_COMMITTER_NAME=aka \
  GIT_COMMITTER_EMAIL=aka@device

# --no-competitors: on 2026-11-29 the setup's fla timing (fla autotunes each head layout on a fresh
# machine) ran past 300 s and used the whole --max-time: 0 candidates. COMPETITORS=1 times them anyway.
# --no-profile likewise keeps ncu's minute on the incumbent for candidates (PROFILE=1 takes it).
COMP=--no-competitors; [ "${COMPETITORS:-0}" = 1 ] && COMP=--competitors
PROF=--no-profile; [ "${PROFILE:-0}" = 1 ] && PROF=--profile
ARGS=(--budget "$BUDGET" --max-time "$MAX_TIME" --gate-rounds "$ROUNDS" "$COMP" "$PROF" ${EXTRA:-})
if [ -n "${LAST:-}" ]; then  # a resumed run keeps its settings; only the two limits change
  timeout -s INT -k 20 "$CAP" python3 -m aka optimize --resume "$(basename "$LAST")" --budget "$BUDGET" \
    --max-time "$MAX_TIME" 2>&1 | tee "$OUT/optimize.log"
elif python3 -c "import typer, rich" 2>/dev/null; then
  timeout -s INT -k 20 "$CAP" python3 -m aka optimize "$OP" "${ARGS[@]}" 2>&1 | tee "$OUT/optimize.log"
else  # the image lacks typer/rich: the same loop through aka.run.loop, with a plain-text view
  echo "typer/rich missing: running aka.run.loop directly (same functions as the CLI)"
  timeout -s INT -k 20 "$CAP" python3 - "$OP" "$BUDGET" "$MAX_TIME" "$ROUNDS" <<'PY' 2>&1 | tee "$OUT/optimize.log"
import json, os, sys

import torch
from aka.evaluate.parent.evaluator import RealEvaluator
from aka.agent.llm.base import get_backend
from aka.run.loop import run_loop
from aka.run.setup import prepare_run
from aka.contract.ops import get_op, project_root
from aka.settings import Budget, OptimizeSettings

op_name, budget, max_time, rounds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])

class Plain:
    def update(self, **f):
        rec = f.get("record")
        if rec:
            b = rec.get("bench") or {}
            x = lambda v: "-" if v is None else f"{v:.3f}x"
            print(f"#{rec['n']:>3} {x(rec.get('score')):>7} vs base {x(b.get('vs_incumbent')):>7} vs inc "
                  f"{(rec.get('failed_stage') or 'done'):<9} {rec['decision']['reason'][:90]} | "
                  f"{', '.join((rec.get('plan') or {}).get('cited_evidence') or [])[:70]}", flush=True)

op = get_op(op_name)
gpu = torch.cuda.is_available()
s = OptimizeSettings(op=op_name, budget=Budget(max_candidates=budget, max_time_s=max_time), gate_rounds=rounds,
                     competitors=os.environ.get("COMPETITORS") == "1", profile=os.environ.get("PROFILE") == "1",
                     interpreter=not gpu, prepare_ahead=max(1, min(4, (os.cpu_count() or 4) // 4)) if gpu else 1)
ev = RealEvaluator(op, s)
store = prepare_run(project_root() / "runs", s, op, ev)
print("run", store.run_id, "baseline", json.dumps(store.read_run()["baseline"]["baseline_us"]), flush=True)
summary = run_loop(store, s, op, get_backend("offline"), ev, Plain())
print("summary", json.dumps(summary), "promotions", json.dumps(store.read_run().get("promotions", [])))
PY
fi
echo "optimize rc ${PIPESTATUS[0]}"

RUN=$(ls -d "$SCRATCH/runs/$OP"/*/ 2>/dev/null | tail -1)
[ -n "$RUN" ] && cp "$RUN/run.json" "$RUN/attempts.jsonl" "$OUT/" 2>/dev/null
cp "$SCRATCH/kernels/$OP/promoted.py" "$SCRATCH/kernels/$OP/promoted.json" "$SCRATCH/kernels/$OP/knowledge.json" \
  "$OUT/" 2>/dev/null  # knowledge.json: what the run measured, for kernels/<op>/ of the real repository
(cd "$SCRATCH" && git log --format='%h %s' | head -5 && git format-patch -q -o "$OUT/patches" HEAD~"$(($(git rev-list --count HEAD) - 1))" 2>/dev/null)
ls "$OUT" "$OUT/patches" 2>/dev/null | head -20
