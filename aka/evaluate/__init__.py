"""Evaluation, the one door to a candidate's measurements: the static policy, the isolated worker
and the candidate's own process, the correctness gate, timing (bench, ABBA compare, calibration)
and the checks on what a timed call ran.

Its code sits in sub-packages by the process it runs in:

- ``parent``: aka's own process (the loop, the CLI): the evaluator, the one door to the workers,
  the runner and the spares that start them, the gate's parent side (``check_kernel``), naming the
  implementations to time, reading the workers' results into the loop's records;
- ``checker``: the worker process (``python -m aka.evaluate.checker.worker``), where the checker computes
  float64 references and verdicts and never runs candidate code (gate, verify, the screen), beside the
  compile call, calibration and the machine's GPU lock;
- ``host``: the candidate's process (``python -m aka.evaluate.host.main``), the only one that runs
  candidate code during a gate or a timing: its entry, the timing harness and core, the input rotation,
  the launch recorder, the interpreter's shim, the implementations' loader, coverage's dry calls;
- ``static``: code that reads a candidate without running it, wherever it is called: the AST policy,
  nvcc-only CUDA checks, compile statistics, the offline sm_90 compile.

Shared by all three processes, directly here: ``wire`` (every type and record that crosses a process
boundary: the gate's payload and report, the timing, screen and compile payloads and results (a bench's
rows of cells, the ABBA comparison, the interpreter's captured launches), the candidate's process's
requests and answers, a worker's result file, ImplRef, how a failure or a death
reads; tests/test_typed_payloads.py holds that no untyped dict crosses elsewhere), ``exchange`` (tensors
as bytes between the checker and the candidate's process) and ``lifeline`` (a child process dies with
its parent). The parent may import every part; the checker imports the candidate's process's timing
core, rotation and interpreter switch but none of the parent's modules that start processes; the host
and the static code import neither the parent nor the checker (tests/test_layers.py holds both).
"""
