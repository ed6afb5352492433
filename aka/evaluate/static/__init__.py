"""Code that reads a candidate without running it in a process of its own: it runs wherever it is called
(aka's parent process, a worker, a test) and starts no process of aka's.

- policy, policy_names: the AST policy every candidate passes before any of its code runs;
- cudacheck: a CUDA candidate's source compiled with nvcc alone (no GPU needed);
- compstats: registers, spills, shared memory and sm_90 instructions read from Triton's compiled
  artefacts (``CompileStats`` is also what the compile call returns to the parent);
- offline_sm90: the launches the interpreter made, compiled for sm_90 with Triton's ptxas.
"""
