"""What a candidate may name: the modules, the standard-library names, Triton's top level and the
torch.cuda queries it may use, and what is refused on any object (frames, code, the environment,
dynamic code, streams). The data behind aka.evaluate.static.policy's checker, in one place to review.
"""

# Modules a candidate may import, and attribute roots under them.
ALLOWED_MODULES = {
    "__future__", "torch", "triton", "triton.language", "math", "functools", "typing",
    "dataclasses", "itertools", "operator", "triton.tools.tensor_descriptor",
    "triton.experimental", "triton.experimental.gluon",  # Gluon: the layouts, TMA and mbarriers Triton hides
    "aka.launch",  # the kept launch path (Triton's runner costs ~3x a launch): the one part of aka a kernel may use
}
# triton.language.extra.cuda.libdevice; gluon.language.nvidia.hopper (tma, mbarrier, warpgroup_mma),
# gluon.nvidia.hopper.TensorDescriptor
ALLOWED_PREFIXES = ("triton.language.", "triton.experimental.gluon.")
FREE_MODULES = {"math", "functools", "typing", "dataclasses", "itertools", "__future__"}
# Names a candidate may take from the standard modules it may import ("*": any public non-module name).
STDLIB_NAMES = {
    "math": "*",
    "itertools": "*",
    "__future__": {"annotations"},
    "functools": {"lru_cache", "cache", "partial", "reduce", "wraps", "cached_property", "total_ordering",
                  "cmp_to_key"},
    "typing": {"Any", "Optional", "Union", "Tuple", "List", "Dict", "Callable", "Sequence", "Iterable",
               "Mapping", "TYPE_CHECKING", "NamedTuple", "Literal", "Final", "ClassVar", "cast"},
    "dataclasses": {"dataclass", "field", "fields", "replace", "asdict", "astuple"},
}
# Attributes that reach frames, code, globals, the interpreter or the environment, on any object.
ATTRS_REFUSED = {"gi_frame", "gi_code", "gi_yieldfrom", "cr_frame", "cr_code", "cr_await", "ag_frame", "ag_code",
                  "f_back", "f_globals", "f_locals", "f_builtins", "f_code", "f_trace", "tb_frame", "tb_next",
                  "co_code", "co_consts", "co_names", "func_globals", "func_code", "mro", "_getframe", "modules",
                  "builtins", "argv", "environ", "getenv", "putenv", "system", "popen", "spawn"}
# Dunder methods a candidate's own classes may define (others change how Python or torch treat values).
DUNDER_DEFS_OK = {"__init__", "__post_init__", "__call__", "__repr__", "__str__", "__len__", "__iter__",
                   "__getitem__", "__eq__", "__hash__", "__lt__", "__le__", "__enter__", "__exit__"}
TRITON_TOP = {"jit", "autotune", "heuristics", "Config", "cdiv", "next_power_of_2", "language",
               "constexpr", "tools", "set_allocator", "TensorDescriptor", "experimental"}
TRITON_TOOLS = {"tensor_descriptor"}
TRITON_EXPERIMENTAL = {"gluon"}
AKA_LAUNCH = {"Launcher", "launch_key"}  # what a candidate may take from aka.launch
# torch.cuda: device queries only (no streams, graphs or events: work must stay on the caller's stream).
TORCH_CUDA = {"is_available", "current_device", "device_count", "get_device_properties",
               "get_device_capability", "get_device_name", "synchronize", "current_stream", "device"}
OPERATOR_REFUSED = {"matmul", "imatmul", "attrgetter", "methodcaller"}
CPP_EXT = ("utils", "cpp_extension", "load_inline")  # torch.utils.cpp_extension.load_inline, behind a flag
BUILTINS_REFUSED = {"open", "exec", "eval", "compile", "__import__", "globals", "locals", "vars", "getattr",
                     "setattr", "delattr", "input", "breakpoint", "exit", "quit", "help", "memoryview", "dir",
                     "importlib", "sys", "os"}
DUNDER_NAMES_OK = {"__name__"}
