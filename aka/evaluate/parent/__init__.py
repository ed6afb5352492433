"""aka's own process (the loop, the CLI): the one door to the worker processes and what it reads back.

- evaluator: the loop's one door to the measuring stages (``Evaluator``, ``RealEvaluator``);
- door: the one door to a worker; runner: a task in a fresh worker process
  (``python -m aka.evaluate.checker.worker``); spares: workers started ahead of their task;
- check: the gate from here (``check_kernel``: the static policy, then the checker in a worker);
- impls: implementations named and resolved here (the candidate's process loads them: aka.evaluate.host.loader);
- outcomes: the workers' results read into the loop's records.

Only this sub-package starts worker processes (tests/test_one_door.py, tests/test_layers.py). It may
import every other part of aka.evaluate; nothing in aka.evaluate.host imports it, and the checker
imports none of its modules that start processes.
"""
