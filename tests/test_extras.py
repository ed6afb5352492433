"""The optional extras (issue 40 point 8): `dev` does not pull Ray's ~240 MB onto every CPU newcomer; the Ray
pool tests skip, saying why, without it; CI installs the `ray` extra so that they still run there."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]


def _extras() -> dict[str, list[str]]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def test_dev_leaves_ray_to_its_own_extra_and_ci_and_the_readme_say_so():
    extras = _extras()
    assert not any(d.startswith("ray") for d in extras["dev"]), extras["dev"]
    assert any(d.startswith("ray") for d in extras["ray"])
    ci = (REPO / ".ci" / "run").read_text()
    assert 'pip install --quiet --disable-pip-version-check -e ".[ray]"' in ci
    assert ci.index("scripts/setup.sh\n") < ci.index('-e ".[ray]"') < ci.index(".venv/bin/python -m pytest -q")
    readme = (REPO / "README.md").read_text()
    for name in extras:  # every extra is listed where the set-up is described
        assert f"`{name}`," in readme, name


def test_the_ray_tests_skip_with_a_reason_without_ray(tmp_path):
    # the extra not installed: `import ray` fails as it does then
    (tmp_path / "ray.py").write_text("raise ModuleNotFoundError(\"No module named 'ray'\", name='ray')\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])])
    r = subprocess.run([sys.executable, "-m", "pytest", "tests/run/test_raypool.py", "-q", "-rs", "-p",
                        "no:cacheprovider"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
                       stdin=subprocess.DEVNULL)
    out = r.stdout + r.stderr
    summary = out.strip().splitlines()[-1]  # e.g. "2 passed, 5 skipped in 0.9s": no error, no failure
    assert r.returncode == 0 and "error" not in summary and "failed" not in summary, out
    assert "5 skipped" in summary and "ray is not installed (pip install -e '.[ray]'" in out, out
