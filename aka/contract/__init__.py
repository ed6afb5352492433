"""The first stage: an operator line's contract (workloads/<op>.yaml, typed in spec) and the op it
names (ops: the contract with its trusted reference, inputs, model and kernels).
"""
