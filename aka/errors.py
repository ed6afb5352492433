"""The small family of errors a user can cause. Each carries a one-line message naming the fix."""

from __future__ import annotations


class AkaError(Exception):
    """Base: the CLI prints ``str(err)`` on one line and exits non-zero."""

    exit_code = 1


class ContractError(AkaError):
    """A workloads/<op>.yaml file is malformed."""


class UnknownOpError(AkaError):
    """An op name that has no contract."""


class ProjectNotFoundError(AkaError):
    """No aka project (workloads/ + kernels/) could be located."""


class ShapeSetError(AkaError):
    """A shape set or shape id that the contract does not define."""


class WorkersLost(AkaError):
    """The evaluation workers (Ray actors, a cluster connection) went away: the run stops, resumable."""

