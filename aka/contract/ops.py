"""Op registry: finds workloads/<op>.yaml and the op's trusted modules under kernels/<op>/.

Everything op-specific (reference, inputs, cost model, kernels) is named by the contract, so
adding an op means adding files, not code here.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

from aka.contract.files import write_if_changed
from aka.contract.module_config import config_of, render
from aka.contract.spec import Contract, ShapeCaseBase, load_contract
from aka.contract.stages import render_stages
from aka.errors import ContractError, ProjectNotFoundError, UnknownOpError
from aka.records import Promoted


def _is_project(path: Path) -> bool:
    return (path / "workloads").is_dir() and (path / "kernels").is_dir()


def project_root() -> Path:
    """AKA_ROOT, else the nearest folder above cwd holding workloads/ and kernels/, else the checkout aka runs from."""
    env = os.environ.get("AKA_ROOT")
    if env:
        root = Path(env).resolve()
        if not _is_project(root):
            raise ProjectNotFoundError(f"AKA_ROOT={env} has no workloads/ and kernels/: point it at an aka checkout")
        return root
    here = Path.cwd().resolve()
    for cand in (here, *here.parents):
        if _is_project(cand):
            return cand
    pkg_parent = Path(__file__).resolve().parents[2]  # aka/contract/ops.py -> the checkout
    if _is_project(pkg_parent):
        return pkg_parent
    raise ProjectNotFoundError(
        "no aka project found (a folder with workloads/ and kernels/): run inside the repository or set AKA_ROOT"
    )


class NotAModuleError(ImportError):
    """A file Python cannot import as a module (its suffix); apart, so a caller can tell it from an
    ImportError raised by the module's own code."""


def load_module(path: Path, name: str | None = None) -> ModuleType:
    """Import a Python file by path under a unique module name: aka's one loader, for the contract's
    trusted modules and, in the candidate's own process (aka.evaluate.host.main), for the candidate."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such module file")
    mod_name = name or f"aka_loaded.{path.parent.name}.{path.stem}_{abs(hash(str(path.resolve()))):x}"
    if name and name in sys.modules:  # a named module is loaded once per process
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise NotAModuleError(f"{path}: cannot be imported as a module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(mod_name, None)
        raise
    return module


def _stat(paths: list[Path]) -> tuple | None:
    """(mtime_ns, size) of each file; None when one is missing (the caller then renders and names it)."""
    try:
        return tuple((st.st_mtime_ns, st.st_size) for st in map(os.stat, paths))
    except OSError:
        return None


class Op:
    """One operator line: its contract plus lazily imported trusted modules."""

    def __init__(self, contract: Contract, root: Path):
        self.contract = contract
        self.root = root
        self._rendered: tuple | None = None  # the stage files' and the rendered baseline's stat when last rendered

    @property
    def name(self) -> str:
        return self.contract.name

    @property
    def spec(self):
        return self.contract.spec

    def path(self, which: str) -> Path:
        """Absolute path of one of the contract's modules (reference, inputs, model, baseline, promoted).
        A baseline written as stage files (modules.stages) is rendered first whenever a stage changed."""
        path = self.root / getattr(self.spec.modules, which)
        if which == "baseline" and self.spec.modules.stages:
            stages = [self.root / s for s in self.spec.modules.stages]
            # rendering parses every stage (26 ms on 2 cores) and the loop asks for the path a few times a
            # candidate: render again only when a stage or the rendered file changed since the last time
            if self._rendered is None or _stat(stages + [path]) != self._rendered:
                write_if_changed(path, render_stages(stages, self.root))
                self._rendered = _stat(stages + [path])
        return path

    @functools.cached_property
    def reference(self) -> ModuleType:
        return load_module(self.path("reference"), f"aka_ops.{self.name}.reference")

    @functools.cached_property
    def inputs(self) -> ModuleType:
        return load_module(self.path("inputs"), f"aka_ops.{self.name}.inputs")

    @functools.cached_property
    def model(self) -> ModuleType:
        return load_module(self.path("model"), f"aka_ops.{self.name}.model")

    def cases(self, which: str) -> list[ShapeCaseBase]:
        return self.contract.cases(which)

    def flops(self, case: ShapeCaseBase) -> float:
        return float(self.model.flops(case))

    def min_bytes(self, case: ShapeCaseBase) -> float:
        return float(self.model.min_bytes(case))

    def default_kernel(self) -> Path:
        """The promoted kernel when one exists, else the baseline."""
        return self.promoted_kernel() or self.path("baseline")

    def promoted_kernel(self) -> Path | None:
        """The promoted kernel as a module file, None when nothing is promoted. promoted.py when the
        promotion changed code; when it changed CONFIG values only (promoted.json's `over_baseline`),
        baseline.py with those values set, rendered into kernels/<op>/.rendered/promoted.py (ignored by git,
        rewritten whenever baseline.py or the values change). A value whose key baseline.py no longer
        has is left out (aka.run.gitops.config_promotion_drift names it)."""
        py = self.path("promoted")
        if py.is_file():
            return py
        try:
            meta = Promoted.parse(py.with_suffix(".json").read_text())
        except OSError:
            return None
        if meta is None or meta.over_baseline is None:
            return None
        base = self.path("baseline").read_text()
        config = config_of(base)
        if config is None:
            raise ContractError(f"{self.path('baseline')}: no literal CONFIG dict, so the promotion stored as "
                                f"CONFIG values in {py.with_suffix('.json').name} cannot be applied; restore "
                                "baseline.py's CONFIG or roll the promotion back (aka rollback)")
        changes = {k: v for k, v in meta.over_baseline.changes.items() if k in config}
        source = render(base, {**config, **changes})
        out = py.parent / ".rendered" / py.name
        if not out.is_file() or out.read_text() != source:
            out.parent.mkdir(exist_ok=True)
            (out.parent / ".gitignore").write_text("*\n")  # ignored in any repository, whatever its own rules
            write_if_changed(out, source)
        return out


def op_names(root: Path | None = None) -> list[str]:
    root = root or project_root()
    return sorted(p.stem for p in (root / "workloads").glob("*.yaml"))


@functools.cache
def _load(root: Path, name: str) -> Op:
    op = Op(load_contract(root / "workloads" / f"{name}.yaml"), root)
    op.path("baseline")  # a baseline written as stages exists as a file for every reader from here on
    return op


def get_op(name: str, root: Path | None = None) -> Op:
    root = root or project_root()
    known = op_names(root)
    if name not in known:
        raise UnknownOpError(f"unknown op '{name}'; known ops: {', '.join(known) or '(none)'}")
    return _load(root, name)


def all_ops(root: Path | None = None) -> list[Op]:
    root = root or project_root()
    return [get_op(name, root) for name in op_names(root)]
