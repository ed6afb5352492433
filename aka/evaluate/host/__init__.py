"""The candidate's process: the only process in which candidate code runs during a gate or a timing,
started by the checker (aka.evaluate.checker.sandbox) as ``python -m aka.evaluate.host.main``.

- main: the process's entry; it loads the candidate, makes its calls and answers the checker;
- harness: the timing harness run there (``bench_host``, ``compare_host``), beside the candidate;
- bench (the timing core), compare (ABBA), rotation (fresh inputs before every timed call);
- launches: what a call ran; interp: Triton's CPU interpreter and its bf16 shim;
- loader: the implementations a timing loads; coverage: the paths a set of shapes compiles (dry calls).

Nothing here imports aka.evaluate.parent or aka.evaluate.checker (tests/test_layers.py holds it): what
the candidate's process shares with the others is aka.evaluate.wire, aka.evaluate.exchange and
aka.evaluate.lifeline. The checker and the parent import from here (the timing core, the rotation's
seeds, the interpreter's switch); the verdicts on what this process reports are the checker's.
"""
