#!/usr/bin/env bash
# Issue 22 on one H200, one device call (~9 min): the same offline campaign twice on the same GPU,
# once the default way (this process measures) and once through Ray (`--cluster local --gpus 1`: a
# local Ray instance, one GPU worker that receives each candidate's source and measures it), then the
# two runs' candidates and decisions side by side. Needs ray in /tmp/site (scripts/device/device_probes.sh
# installs it from .rayw/ in an earlier call while the machine stays warm).
# Usage (device, repo root): bash scripts/device/device_ray_compare.sh     env: OP (gdn_prefill), BUDGET (5), MAX_TIME (240)
set -o pipefail
OUT=${OUT:-/tmp/raycmp_out}; mkdir -p "$OUT"
export PYTHONPATH="/tmp/site:$PWD"
python3 -c 'import ray; print("ray", ray.__version__)' || exit 2
OP=${OP:-gdn_prefill}; B=${BUDGET:-5}; T=${MAX_TIME:-240}
OUT=/tmp/raycmp_local OP=$OP BUDGET=$B MAX_TIME=$T CAP=$((T + 30)) bash scripts/device/device_optimize.sh | grep -v "^$" | tail -25
OUT=/tmp/raycmp_ray OP=$OP BUDGET=$B MAX_TIME=$T CAP=$((T + 30)) EXTRA="--cluster local --gpus 1" \
  bash scripts/device/device_optimize.sh | grep -v "^$" | tail -25
python3 - /tmp/raycmp_local/attempts.jsonl /tmp/raycmp_ray/attempts.jsonl <<'PY' | tee "$OUT/compare.txt"
import json, sys

runs = [[json.loads(x) for x in open(p) if x.strip()] for p in sys.argv[1:]]
print("| # | candidate (local) | candidate (Ray) | same source | decision local | decision Ray | score local | score Ray |")
print("|---|---|---|---|---|---|---|---|")
same = 0
for a, b in zip(*runs):
    s = a["code_hash"] == b["code_hash"]
    d = (a["decision"] or {}).get("promote") == (b["decision"] or {}).get("promote")
    same += s and d
    f = lambda r: "-" if r.get("score") is None else f"{r['score']:.3f}"
    print(f"| {a['n']} | {(a.get('plan') or {}).get('hypothesis', '')[:40]} | {(b.get('plan') or {}).get('hypothesis', '')[:40]} "
          f"| {s} | {(a['decision'] or {}).get('reason', '')[:50]} | {(b['decision'] or {}).get('reason', '')[:50]} | {f(a)} | {f(b)} |")
print(f"{len(runs[0])} local, {len(runs[1])} Ray candidates; {same} of {min(map(len, runs))} pairs same source and decision")
PY
for d in local ray; do cp /tmp/raycmp_$d/optimize.log "$OUT/optimize_$d.log"; cp /tmp/raycmp_$d/run.json "$OUT/run_$d.json"; done
tar -czf "$OUT/attempts.tgz" -C /tmp raycmp_local/attempts.jsonl raycmp_ray/attempts.jsonl
ls "$OUT"
