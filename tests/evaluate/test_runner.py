"""aka.evaluate.parent.runner: a fresh process per task; failures of every kind come back as a WorkerResult."""

from __future__ import annotations

import os
import time

import pytest

from aka.evaluate.parent.runner import run_task, worker_env

T = "tests.evaluate.tasks:"


def test_value_comes_back_and_stdout_noise_does_not_corrupt_it():
    res = run_task(T + "echo", {"a": [1, 2]}, timeout=60, interpreter=False)
    assert res.ok and res.stage is None and res.exit_code == 0
    assert res.value["echo"] == {"a": [1, 2]}
    assert res.value["pid"] != os.getpid()
    assert res.value["pgid"] == res.value["pid"]  # its own process group: a timeout kills all of it
    assert "noise on stdout" in res.stderr_tail


def test_exception_is_recorded_as_one_line_with_a_traceback_tail():
    res = run_task(T + "fail", {}, timeout=60, interpreter=False)
    assert not res.ok and res.stage == "run"
    assert res.error == "ValueError: bad value second line"
    assert "Traceback" in res.stderr_tail and "tasks.py" in res.stderr_tail


def test_segfault_is_a_crash_with_the_signal():
    res = run_task(T + "segfault", {}, timeout=60, interpreter=False)
    assert (res.ok, res.stage, res.signal, res.exit_code) == (False, "crash", "SIGSEGV", -11)
    assert "Fatal Python error: Segmentation fault" in res.stderr_tail  # faulthandler's report


def test_exit_without_result_is_a_crash():
    res = run_task(T + "exit_quietly", {}, timeout=60, interpreter=False)
    assert res.stage == "crash" and res.exit_code == 3 and "code 3" in res.error


def test_memory_error_is_oom():
    res = run_task(T + "oom", {}, timeout=60, interpreter=False)
    assert res.stage == "oom" and res.error.startswith("MemoryError")


def test_unserialisable_result():
    res = run_task(T + "not_json", {}, timeout=60, interpreter=False)
    assert res.stage == "run" and "not JSON-serialisable" in res.error


def test_unknown_stage_on_an_exception_is_ignored():
    res = run_task(T + "spoofed_stage", {}, timeout=60, interpreter=False)
    assert res.stage == "run" and res.error == "RuntimeError: pretends to be something else"


def test_unknown_task():
    res = run_task("tests.evaluate.tasks:nope", {}, timeout=60, interpreter=False)
    assert res.stage == "run" and "AttributeError" in res.error


def test_timeout_kills_the_whole_process_group(tmp_path):
    pidfile = tmp_path / "grandchild.pid"
    t0 = time.monotonic()
    res = run_task(T + "hang", {"pidfile": str(pidfile)}, timeout=3, interpreter=False)
    assert time.monotonic() - t0 < 10
    assert res.stage == "timeout" and res.error == "no result within 3 s: killed"
    grandchild = int(pidfile.read_text())
    for _ in range(50):  # reaped by init shortly after the kill
        if not _alive(grandchild):
            break
        time.sleep(0.1)
    assert not _alive(grandchild)
    assert run_task(T + "echo", {}, timeout=60, interpreter=False).ok  # and the next task runs


def test_ctrl_c_while_waiting_kills_the_worker_group_and_re_raises(tmp_path, monkeypatch):
    """Ctrl-C lands in the parent's wait: the worker (and what it spawned) must not keep running."""
    import subprocess

    pidfile = tmp_path / "grandchild.pid"
    real_wait = subprocess.Popen.wait

    def interrupted_wait(self, timeout=None):
        if timeout is None:  # the reaping wait after the kill
            return real_wait(self)
        for _ in range(100):  # let the worker start its grandchild first
            if pidfile.exists() and pidfile.read_text():
                break
            time.sleep(0.1)
        raise KeyboardInterrupt

    monkeypatch.setattr(subprocess.Popen, "wait", interrupted_wait)
    with pytest.raises(KeyboardInterrupt):
        run_task(T + "hang", {"pidfile": str(pidfile)}, timeout=60, interpreter=False)
    grandchild = int(pidfile.read_text())
    for _ in range(50):
        if not _alive(grandchild):
            break
        time.sleep(0.1)
    assert not _alive(grandchild)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_secrets_are_scrubbed(monkeypatch):
    for k in ("OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "AKA_ANTHROPIC_KEY", "HF_TOKEN",
              "MY_PASSWORD", "TORCH_HUB_TOKEN"):
        monkeypatch.setenv(k, "s3cr3t")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    env = run_task(T + "env", {}, timeout=60, interpreter=False).value
    assert "s3cr3t" not in env.values()
    assert env["CUDA_VISIBLE_DEVICES"] == "0" and "PATH" in env


def test_worker_env_is_an_allowlist():
    env = worker_env({"PATH": "/bin", "RANDOM_THING": "x", "ANTHROPIC_API_KEY": "k", "TRITON_CACHE_DIR": "/c"})
    assert env["PATH"] == "/bin" and env["TRITON_CACHE_DIR"] == "/c"
    assert "RANDOM_THING" not in env and "ANTHROPIC_API_KEY" not in env
    assert env["AKA_WORKER_INTERPRETER"] == "auto"


@pytest.mark.parametrize("flag", [True, False])
def test_interpreter_flag_reaches_the_child(flag):
    res = run_task(T + "interpreter", {}, timeout=120, interpreter=flag)
    assert res.ok, res.error
    assert res.value["interpret"] is flag
    if flag:
        assert res.value["shim_ok"], res.value  # the shim is installed before the task runs


def test_the_worker_imports_this_checkout():
    """The worker's PYTHONPATH starts with the folder that holds this aka package (a device run has no
    `pip install -e .`), wherever runner.py sits inside it."""
    from pathlib import Path

    import aka

    first = worker_env({"PATH": "/bin"})["PYTHONPATH"].split(os.pathsep)[0]
    assert Path(first) == Path(aka.__file__).resolve().parents[1]
