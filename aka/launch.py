"""A kept launch path for @triton.jit and @gluon.jit kernels: what a candidate may import to launch its
kernels without paying Triton's Python launcher on every call.

A kernel's host cost per call is mostly launches. Taken apart on an H100 host (docs/perf/host.md,
2026-12-07, a kernel with five host TMA descriptors): Triton's compiled runner (`compiled[grid](...)`)
costs 16.8 µs a launch; its C launcher called with the tensor maps encoded once and kept costs 5.6 µs.
The runner's layers (device and stream lookups, launch metadata, the wrapper that encodes every
descriptor's tensor map again on each call) are the difference. :class:`Launcher` keeps, per launch
key, what those layers compute and calls the C launcher itself.

What keeps it equivalent to the runner:
- The first call for a key goes through Triton's JIT (binding, specialisation, compile), so a new key
  always compiles what Triton would; later calls with that key reuse the compiled kernel. The key is the
  caller's statement of everything the launch specialises on (:func:`launch_key` per argument when the
  caller has none). A caller whose key omits something gets Triton's code for another specialisation:
  wrong results, which the gate refuses as any other.
- A descriptor's tensor map is kept per (address, shape, strides, box, padding): a map holds nothing
  else, so a kept map is the one Triton would encode for that call.
- The launch goes to the current device's current stream, as Triton's runner does (under a CUDA graph
  capture, the capturing stream).
- Where the kept path cannot stand in for the runner, every call takes the runner: a launch hook is set
  (a profiler), the kernel needs a scratch buffer, the C launcher is not the shape this Triton's is
  (an unexpected Triton), or the interpreter runs (it compiles nothing).
- Each kept launch is reported to the observers (:func:`observe`): the gate counts a candidate's launches
  through the runner's wrappers, which the kept path bypasses.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

_OBSERVERS: list[Callable[[str], None]] = []
KEYS_KEPT = 256  # compiled kernels a Launcher keeps (a new key past it starts the table again)
MAPS_KEPT = 64  # tensor maps a kept kernel keeps (addresses change with the caller's buffers)


def observe(fn: Callable[[str], None]) -> None:
    """Call fn(kernel name) on every launch that takes the kept path (idempotent per fn)."""
    if fn not in _OBSERVERS:
        _OBSERVERS.append(fn)


def launch_key(a: Any) -> Any:
    """What Triton specialises a compiled kernel on, per argument, or more: a tensor's dtype, device and
    16-byte alignment; an int's exact value (Triton keys on == 1, % 16 and the width); a float's or
    bool's type and value; a host TMA descriptor's base (dtype, device, alignment), shape, strides and
    box; anything else by identity of type and value."""
    import torch

    t = type(a)
    if t is int:
        return a
    if isinstance(a, torch.Tensor):
        return (a.dtype, a.device, a.data_ptr() & 15)
    if t is float or t is bool:
        return (t, a)
    base = getattr(a, "base", None)
    if isinstance(base, torch.Tensor):  # a host TensorDescriptor (Triton's or Gluon's)
        return (base.dtype, base.device, base.data_ptr() & 15, *a.shape, *a.strides, *a.block_shape)
    return (t, a)


class Launcher:
    """Launches one @triton.jit or @gluon.jit kernel: `L(grid, args, kw, key=None)`.

    args: the kernel's leading positional arguments (tensors, ints, floats, host descriptors); kw: the
    rest of its parameters by name (constexprs) and the launch options (num_warps, num_stages, ...), the
    way `kernel[grid](*args, **kw)` takes them. key: everything the launch specialises on, or None (then
    :func:`launch_key` of every argument and kw's items). kept_calls counts the launches that took the
    kept path (the GPU tests check it is taken)."""

    def __init__(self, fn):
        self.fn = fn
        self.hits: dict = {}
        self.kept_calls = 0

    def warm(self, key) -> bool:
        """Whether a launch with this key reuses a compiled kernel (no JIT)."""
        return key in self.hits

    def __call__(self, grid: Sequence[int], args: Sequence[Any], kw: dict, key=None) -> None:
        if key is None:
            key = (tuple(kw.items()), tuple(map(launch_key, args)))
        hit = self.hits.get(key)
        if hit is not None:
            if hit(grid, args):
                self.kept_calls += 1
            return
        compiled = self.fn[grid](*args, **kw)
        if hasattr(compiled, "packed_metadata"):  # a real compile (the interpreter returns no kernel)
            if len(self.hits) >= KEYS_KEPT:
                self.hits.clear()
            # the launchers take every parameter in order, constexprs included; one the caller left out has
            # its default, as the JIT bound it (Triton's KernelParam)
            defaults = {p.name: p.default for p in getattr(self.fn, "params", ())}
            tail = tuple(kw[n] if n in kw else defaults[n] for n in self.fn.arg_names[len(args):])
            self.hits[key] = _Kept(compiled, tail)


def _raw_launch(run) -> Any:
    """Triton's C launch function under a CudaLauncher, or None where this Triton's is another shape. With
    descriptor parameters Triton wraps it in a Python closure that encodes every map on each call: the
    function is what that closure calls."""
    launch = getattr(run, "launch", None)
    cells = getattr(launch, "__closure__", None)
    if launch is None or not cells:
        return launch
    names = launch.__code__.co_freevars  # wrap_handle_tensordesc's inner(*args) closes over `launcher`
    return cells[names.index("launcher")].cell_contents if "launcher" in names else None


def _hooked(hook) -> bool:
    """Whether a launch hook is set: Triton 3.6 keeps an empty HookChain (its `calls` list) when none is."""
    return hook is not None and bool(getattr(hook, "calls", True))


class _Kept:
    """One compiled kernel's launch: the C launcher with its fixed arguments kept, or the runner."""

    def __init__(self, compiled, tail: tuple):
        self.compiled, self.tail = compiled, tail
        self.name = getattr(compiled, "name", "kernel")
        self.raw = None
        try:
            self._keep(compiled)
        except Exception:  # an unexpected Triton: the runner serves every call
            self.raw = None

    def _keep(self, compiled) -> None:
        import triton
        from triton import knobs
        from triton.backends.nvidia import driver as nvidia

        # the C launcher's leading arguments as this module passes them (Triton 3.6's layout: grid, stream,
        # function, cooperative, PDL, two scratch buffers, packed metadata, launch metadata, two hooks)
        if getattr(nvidia, "_BASE_ARGS_FORMAT", None) != "iiiKKppOOOOOO":
            return
        run = compiled.run  # loads the binary on the current device (what the runner does first)
        if getattr(run, "global_scratch_size", 1) or getattr(run, "profile_scratch_size", 1):
            return  # the runner allocates those per launch
        raw = _raw_launch(run)
        if raw is None:
            return
        drv = triton.runtime.driver.active
        sig = list(compiled.src.signature.values())
        metas = list(getattr(compiled.metadata, "tensordesc_meta", None) or [])
        descs = [i for i, s in enumerate(sig) if isinstance(s, str) and s.startswith("tensordesc")]
        if metas and len(metas) != len(descs):
            return
        self.descs = dict(zip(descs, metas or [None] * len(descs)))
        self.fill = drv.utils.fill_tma_descriptor
        self.tma_dtype = nvidia.TMA_DTYPE_DEVICE_TO_HOST
        self.device, self.stream = drv.get_current_device, drv.get_current_stream
        self.knobs = knobs.runtime
        self.head = (compiled.function, run.launch_cooperative_grid, run.launch_pdl, None, None,
                     compiled.packed_metadata, None, None, None)
        self.maps: dict = {}
        self.raw = raw

    def __call__(self, grid: Sequence[int], args: Sequence[Any]) -> bool:
        """Launch; True when the kept path took it."""
        g = (*grid, 1, 1)
        k = self.knobs if self.raw is not None else None
        if k is None or _hooked(k.launch_enter_hook) or _hooked(k.launch_exit_hook):
            self.compiled[g[:3]](*args, *self.tail)
            return False
        every = (*args, *self.tail)
        if self.descs:
            flat: list = []
            for i, a in enumerate(every):
                if i in self.descs:
                    flat.extend(self._desc(i, a))
                else:
                    flat.append(a)
            every = flat
        self.raw(g[0], g[1], g[2], self.stream(self.device()), *self.head, *every)
        for fn in _OBSERVERS:
            fn(self.name)
        return True

    def _desc(self, i: int, d) -> list:
        """A host descriptor's launch arguments, as Triton's wrapper expands it; its tensor map kept."""
        meta = self.descs[i]
        shape, strides = list(d.shape), list(d.strides)
        if meta is None:  # lowered without a tensor map: base pointer, sizes twice and the padding flag
            return [d.base, *shape, *strides, d.padding == "nan", *shape, *strides]
        if meta["fp4_padded"]:
            shape[-1] *= 2
        ptr = d.base.data_ptr()
        mkey = (i, ptr, *shape, *strides, *d.block_shape, d.padding)
        m = self.maps.get(mkey)
        if m is None:
            if len(self.maps) >= MAPS_KEPT:
                self.maps.clear()
            if strides[-1] != 1:
                raise ValueError(f"a TMA descriptor's last stride must be 1, not {strides[-1]}")
            m = self.maps[mkey] = self.fill(ptr, meta["swizzle"], meta["elem_size"],
                                            self.tma_dtype[meta["elem_type"]], meta["block_size"], shape, strides,
                                            1 if d.padding == "nan" else 0)
        return [m, *shape, *strides]
