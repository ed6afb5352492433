"""The worker process: ``python -m aka.evaluate.checker.worker TASK PAYLOAD RESULT``, started by the parent
(aka.evaluate.parent.runner) in a session of its own for every task, and the checker inside it.

- worker: the process's entry (a task by its "module:function" name, its result as a file);
- gate, gate_checks, verify: the checker. It computes float64 references and verdicts and never runs
  candidate code: it starts the candidate's process (sandbox, aka.evaluate.host) and judges the bytes
  that come back, for the gate and for every timing (``bench_worker``, ``compare_worker``);
- tasks: the evaluator's own tasks: the screen (gate and timing through one candidate process) and the
  compile call, which imports and calls the candidate here, before any verdict, only so Triton
  compiles (aka.evaluate.precompile: its compiles done once each, side by side);
- calibrate: the device's measured ceilings, measured here, never beside the candidate.

The machine's lock between compile calls and timings (aka.evaluate.gpulock) is shared with the parent's
ABBA; the precompile with the bench in the candidate's process: both live beside this package.

Nothing here imports the parent's modules that start processes (runner, spares, door, evaluator;
tests/test_layers.py holds it); aka.evaluate.parent.outcomes, which only reads results, is used by the
screen. What crosses to the parent and to the candidate's process is aka.evaluate.wire's.
"""
