"""aka: a kernel-optimization agent orchestrator."""

__version__ = "0.1.0"
