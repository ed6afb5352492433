"""The candidate's own process (aka.evaluate.host.main) and the bytes that cross to the checker
(aka.evaluate.exchange)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch

from aka.evaluate import exchange
from aka.evaluate.checker.sandbox import Host, HostError
from aka.evaluate.wire import CallRequest, ExpectedOutput, LoadRequest

HEAD = "import torch\n\n\ndef fa4_decode(q, k_cache, v_cache, page_table, kv_lens, softmax_scale=None):\n"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.int32, torch.bool, torch.float64])
def test_tensors_cross_as_bytes_exactly(tmp_path, dtype):
    t = (torch.randn(3, 5, 7) * 10).to(dtype)
    ref = exchange.put(t, tmp_path, "x.bin")
    back = exchange.get(ref, tmp_path)
    assert back.dtype == dtype and back.shape == t.shape and torch.equal(back, t)
    (tmp_path / "x.bin").write_bytes(b"\0" * 7)  # a later write to the file cannot reach `back`
    assert torch.equal(back, t)


def test_a_description_that_does_not_match_its_file_is_refused(tmp_path):
    ref = exchange.put(torch.zeros(4, 4), tmp_path, "x.bin")
    with pytest.raises(exchange.ExchangeError, match="holds 64 bytes, its description says 128"):
        exchange.get(ref.model_copy(update={"shape": (4, 8)}), tmp_path)
    with pytest.raises(exchange.ExchangeError, match="bad exchange file name"):
        exchange.get(ref.model_copy(update={"file": "../x.bin"}), tmp_path)
    with pytest.raises(exchange.ExchangeError, match="cannot cross"):
        exchange.get(ref.model_copy(update={"dtype": "complex64"}), tmp_path)


def _host_with(tmp_path, body: str) -> tuple[Host, str]:
    path = tmp_path / "cand.py"
    path.write_text(HEAD + body)
    return Host(), str(path)


def test_host_loads_calls_and_exits(tmp_path):
    host, path = _host_with(tmp_path, "    return q.clone()\n")
    with host:
        assert host.request(LoadRequest(kernel=path, entry="fa4_decode"), timeout=120).ok
        q = torch.randn(2, 3, 4).to(torch.bfloat16)
        refs = {"q": exchange.put(q, host.folder, "q.bin")}
        for k in ("k_cache", "v_cache", "page_table", "kv_lens"):
            refs[k] = exchange.put(torch.zeros(1, dtype=torch.int32), host.folder, f"{k}.bin")
        ans = host.request(CallRequest(device="cpu", inputs=refs,
                                       expected=[ExpectedOutput(name="o", shape=[2, 3, 4], dtype="bfloat16")]),
                           timeout=60)
        assert ans.ok and not ans.problem, ans
        out = exchange.get(ans.outputs[0], host.folder)
        assert torch.equal(out, q)
        assert ans.launches.torch_ops == {"clone": 1} and not ans.launches.torch_compute
    assert host.proc.poll() is not None and not host.folder.exists()


def test_calls_of_a_shape_hand_fresh_values_over_in_the_same_buffers(tmp_path):
    """A server's KV cache stays where it is: a kernel keyed on input addresses meets them again."""
    host, path = _host_with(tmp_path, "    return q.clone(), torch.full((1,), float(q.data_ptr() % 2**20))\n")
    seen = []
    with host:
        assert host.request(LoadRequest(kernel=path, entry="fa4_decode"), timeout=120).ok
        for shape, first in (((2, 3, 4), 1.0), ((2, 3, 4), 2.0), ((5, 3, 4), 3.0)):
            q = torch.full(shape, first)
            refs = {"q": exchange.put(q, host.folder, "q.bin")}
            for k in ("k_cache", "v_cache", "page_table", "kv_lens"):
                refs[k] = exchange.put(torch.zeros(1, dtype=torch.int32), host.folder, f"{k}.bin")
            expected = [ExpectedOutput(name="o", shape=list(shape), dtype="float32"),
                        ExpectedOutput(name="addr", shape=[1], dtype="float32")]
            ans = host.request(CallRequest(device="cpu", inputs=refs, expected=expected), timeout=60)
            assert ans.ok and not ans.problem, ans
            o, addr = (exchange.get(r, host.folder) for r in ans.outputs)
            seen.append((o.unique().item(), addr.item()))
    assert [v for v, _ in seen] == [1.0, 2.0, 3.0]  # the values are each call's own
    assert seen[0][1] == seen[1][1]  # at the same address for the same shape


def test_a_hung_call_is_killed_with_its_process(tmp_path):
    path = tmp_path / "hang.py"
    path.write_text("def fa4_decode(**kw):\n    while True:\n        pass\n")
    host, path = Host(), str(path)
    with host:
        host.request(LoadRequest(kernel=path, entry="fa4_decode"), timeout=120)
        t0 = time.monotonic()
        with pytest.raises(HostError) as err:
            host.request(CallRequest(device="cpu"), timeout=3)
        assert err.value.stage == "timeout" and time.monotonic() - t0 < 10
        assert host.proc.wait(timeout=10) is not None


def test_a_process_that_dies_or_writes_garbage_to_the_control_pipe(tmp_path):
    host, path = _host_with(tmp_path, "    return q\n")
    with host:
        host.request(LoadRequest(kernel=path, entry="fa4_decode"), timeout=120)
        os.kill(host.proc.pid, 11)
        with pytest.raises(HostError, match="died of SIGSEGV") as err:
            host.request(CallRequest(device="cpu"), timeout=30)
        assert err.value.stage == "crash"
    with Host() as host:
        # the response descriptor is the second argument of aka.evaluate.host.main: whatever number it got
        fd = int(host.proc.args[4])
        (tmp_path / "liar.py").write_text(f"import os\nos.write({fd}, b'not json\\n')\n" + HEAD + "    return q\n")
        with pytest.raises(HostError, match="malformed data"):
            host.request(LoadRequest(kernel=str(tmp_path / "liar.py"), entry="fa4_decode"), timeout=120)


def test_the_host_dies_with_its_parent(tmp_path):
    """A checker killed by the runner's timeout must not leave the candidate's process behind."""
    import subprocess
    import sys

    root = str(Path(__file__).parents[2])
    code = (f"import sys, time; sys.path.insert(0, {root!r})\nfrom aka.evaluate.checker.sandbox import Host\n"
            "h = Host()\nprint(h.proc.pid, flush=True)\ntime.sleep(60)\n")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    time.sleep(3)  # let the host start and arm its death signal
    parent.kill()
    parent.wait()
    from aka.evaluate.parent.runner import remove_folders_of

    # what a runner does once its worker is gone: the exchange folder (named for its maker) goes too
    assert [n for n in remove_folders_of(parent.pid) if n.startswith(f"aka-exchange-{parent.pid}-")]
    for _ in range(50):
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    os.kill(child, 9)
    pytest.fail("the candidate's process outlived its checker")
