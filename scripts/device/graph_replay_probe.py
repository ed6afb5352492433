"""Where a graph replay's host time goes (device script; issue 39's host line).

One CUDA graph of one small kernel, replayed back to back with no sync; the mean host time per call of:
torch's CUDAGraph.replay, torch.cuda.is_current_stream_capturing (the check aka.graphed makes per call), the
current stream's raw handle, cudaGraphLaunch called directly on the graph's executable (ctypes, libcudart,
torch's raw_cuda_graph_exec), and aka.graphed's keyed and bound calls of the same op. The GPU work per call
(a 1-element add) is far shorter than any of these, so the loop measures the host.

Then the bench's own host figure (aka.evaluate.host.bench: the interval from a start event on an idle GPU to an
event closed on the stream after the call, minus the replay's GPU time with the GPU kept busy before the start)
for graphs of 1, 2, 4 and 8 such kernels, replayed by torch and by cudaGraphLaunch, and for one eager add. The
throughput loop above cannot see what a launch costs between the host's call and the GPU's first node; this
figure holds it, and its growth with the nodes says whether the bound call's 9-29 µs (docs/perf/host.md) are
the graph's launch on the device rather than Python.

    python scripts/device/graph_replay_probe.py [--n 3000]
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import glob
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from fa4_host_cost import host_us as _per_call_us  # noqa: E402  (mean host µs a call, no sync in the loop)

from aka.evaluate.host.bench import CudaTimer, GraphTimer  # noqa: E402
from aka.graphed import graphed  # noqa: E402


def _median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def idle_host_us(call, n):
    """The bench's host figure for ``call``: median stream-closed interval from an idle GPU minus the median
    GPU time of the same call with the GPU busy before the start event (both µs)."""
    eager, busy = CudaTimer(1 << 20), GraphTimer(1 << 20)
    for _ in range(5):
        call()
    stream = []
    for _ in range(n):
        eager.measure(call)
        stream.append(eager.stream_us)
    gpu = _median([busy.measure(call) for _ in range(n)])
    return _median(stream) - gpu, gpu


def _cudart():
    """libcudart as torch loaded it (the process's own copy), else the first one found."""
    for line in open("/proc/self/maps"):
        if "libcudart.so" in line:
            return ctypes.CDLL(line.split()[-1])
    roots = [os.path.dirname(torch.__file__), *sys.path]
    for root in roots:
        for path in glob.glob(os.path.join(root, "**", "libcudart.so*"), recursive=True):
            return ctypes.CDLL(path)
    name = ctypes.util.find_library("cudart")
    return ctypes.CDLL(name) if name else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=3000)
    n = ap.parse_args().n
    x = torch.zeros(1, device="cuda")

    def op(t):
        return t.add_(1)

    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        op(x)
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        op(x)
    rows = [("torch CUDAGraph.replay()", _per_call_us(g.replay, n)),
            ("torch.cuda.is_current_stream_capturing()", _per_call_us(torch.cuda.is_current_stream_capturing, n)),
            ("torch._C._cuda_getCurrentRawStream(0)", _per_call_us(lambda: torch._C._cuda_getCurrentRawStream(0), n))]
    raw = getattr(g, "raw_cuda_graph_exec", None)
    lib = _cudart()
    direct = None  # cudaGraphLaunch with its argtypes, once a call of it returned 0
    if raw is not None and lib is not None:
        try:
            exec_ptr = ctypes.c_void_p(raw())
            launch = lib.cudaGraphLaunch
            launch.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
            get_stream = torch._C._cuda_getCurrentRawStream
            rc = launch(exec_ptr, ctypes.c_void_p(get_stream(0)))
            torch.cuda.synchronize()
            if rc == 0:
                direct = launch
                rows.append(("cudaGraphLaunch (ctypes, current raw stream)",
                             _per_call_us(lambda: launch(exec_ptr, ctypes.c_void_p(get_stream(0))), n)))
            else:
                rows.append((f"cudaGraphLaunch returned {rc}", float("nan")))
        except Exception as exc:  # an older torch, or a graph kept without its exec
            rows.append((f"cudaGraphLaunch: {type(exc).__name__}: {exc}", float("nan")))
    else:
        rows.append(("cudaGraphLaunch: no raw_cuda_graph_exec or libcudart", float("nan")))
    gop = graphed(op)
    for _ in range(3):
        gop(x)
    rows.append(("aka.graphed keyed call", _per_call_us(lambda: gop(x), n)))
    bound = gop.bind(x)
    rows.append(("aka.graphed bound call", _per_call_us(bound, n)))
    rows.append(("eager x.add_(1)", _per_call_us(lambda: op(x), n)))
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, {n} calls each, host µs a call:")
    for name, us in rows:
        print(f"  {us:7.2f}  {name}")
    m = max(n // 10, 50)
    print(f"the bench's host figure from an idle GPU (medians of {m}): host µs, GPU µs")
    us, gpu = idle_host_us(lambda: op(x), m)
    print(f"  {us:7.2f} {gpu:7.2f}  eager x.add_(1)")
    for nodes in (1, 2, 4, 8):
        gn = torch.cuda.CUDAGraph()
        with torch.cuda.graph(gn):
            for _ in range(nodes):
                op(x)
        torch.cuda.synchronize()
        us, gpu = idle_host_us(gn.replay, m)
        print(f"  {us:7.2f} {gpu:7.2f}  torch replay, {nodes} node(s)")
        if direct is not None:
            ep, stream = ctypes.c_void_p(gn.raw_cuda_graph_exec()), torch._C._cuda_getCurrentRawStream
            us, gpu = idle_host_us(lambda ep=ep, stream=stream: direct(ep, ctypes.c_void_p(stream(0))), m)
            print(f"  {us:7.2f} {gpu:7.2f}  cudaGraphLaunch, {nodes} node(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
