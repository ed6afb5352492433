"""Evaluation, the one door to a candidate's measurements: the static policy, the isolated worker
and the candidate's own process, the correctness gate, timing (bench, ABBA compare, calibration)
and the checks on what a timed call ran.
"""
