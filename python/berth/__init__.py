"""Berth's Python SDK: run Python functions as tasks and classes as actors on a Berth cluster.

    import berth

    @berth.remote(num_cpus=1, label_selector={"berth.io/availability-zone": "in(us-a,us-b)"})
    def square(x):
        return x * x

    print(berth.get([square.remote(i) for i in range(4)]))

The names below are imported on first use, so a worker process (``python -m berth.worker``)
starts without loading the driver's half of the SDK.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# Public name -> the module that defines it.
_EXPORTS = {
    "init": "_runtime", "shutdown": "_runtime", "is_initialized": "_runtime",
    "remote": "_remote", "method": "_remote", "ActorClass": "_remote", "ActorHandle": "_remote",
    "RemoteFunction": "_remote",
    "ObjectRef": "_objects", "ObjectRefGenerator": "_objects", "get": "_objects", "wait": "_objects",
    "put": "_objects",
    "nodes": "_cluster", "cluster_resources": "_cluster", "available_resources": "_cluster",
    "taint": "_cluster", "explain": "_cluster", "kill": "_cluster", "cancel": "_cluster",
    "get_actor": "_cluster", "process": "_cluster", "Process": "_cluster",
    "get_runtime_context": "_context", "RuntimeContext": "_context", "get_gpu_ids": "_context",
    "In": "util.scheduling_strategies", "NotIn": "util.scheduling_strategies",
    "Exists": "util.scheduling_strategies", "DoesNotExist": "util.scheduling_strategies",
}
_SUBMODULES = {"exceptions", "internal", "util"}

__all__ = sorted(list(_EXPORTS) + list(_SUBMODULES))


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'berth' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return __all__
