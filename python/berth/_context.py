"""``berth.get_runtime_context()``: what this process is in Berth, as Ray's runtime context
says it: its job and namespace, and inside a worker its actor or task, attempt, node, and what
was reserved for it (resources, GPU IDs). Read from the environment its agent gave it: nothing
connects."""

from __future__ import annotations

import json
import os
import sys
from typing import Dict, List, Optional


def _runtime():
    return getattr(sys.modules.get("berth._runtime"), "_current", None)


class RuntimeContext:
    """This process in Berth: its job and namespace, and inside a worker its work."""

    def get_job_id(self) -> Optional[str]:
        """The job this process's work belongs to (``job-3``): a driver's own job once
        ``berth.init()`` ran (None before), a worker's work's job (None for work that belongs
        to none, such as what the CLI creates)."""
        runtime = _runtime()
        if runtime is not None:
            return runtime.job_id
        return os.environ.get("BERTH_JOB_ID") or None

    def get_actor_id(self) -> Optional[str]:
        """Inside an actor's process, its ID (``actor-5``); else None."""
        return os.environ.get("BERTH_ACTOR_ID") or None

    def get_task_id(self) -> Optional[str]:
        """Inside a task's process, its ID (``task-9``); else None."""
        return os.environ.get("BERTH_TASK_ID") or None

    def get_node_id(self) -> Optional[str]:
        """Inside a worker, the ID of the node it runs on; None in a driver."""
        return os.environ.get("BERTH_NODE_ID") or None

    def get_namespace(self) -> str:
        """The namespace of the actors this process creates and looks up: a worker's work's,
        a driver's from ``berth.init(namespace=...)`` (``default``)."""
        runtime = _runtime()
        if runtime is not None:
            return runtime.namespace
        return os.environ.get("BERTH_NAMESPACE") or "default"

    @property
    def namespace(self) -> str:
        """As :meth:`get_namespace` (Ray's property)."""
        return self.get_namespace()

    def get_attempt(self) -> Optional[int]:
        """Inside a worker, its attempt: 1 for the first start of the actor or task, one more
        per restart or retry; None in a driver."""
        attempt = os.environ.get("BERTH_ATTEMPT")
        return int(attempt) if attempt else None

    @property
    def was_current_actor_reconstructed(self) -> bool:
        """True in an actor's process that is a restart (attempt 2 or later)."""
        return self.get_actor_id() is not None and (self.get_attempt() or 1) > 1

    def get_assigned_resources(self) -> Dict[str, float]:
        """Inside a worker, what was reserved for its work, by resource (``{"CPU": 1.0, "GPU":
        0.5}``; memory in bytes); empty in a driver."""
        from ._cluster import quantity

        raw = json.loads(os.environ.get("BERTH_RESOURCES") or "{}")
        return {name: quantity(str(amount)) for name, amount in raw.items()}

    def get_accelerator_ids(self) -> Dict[str, List[str]]:
        """Inside a worker, the instance IDs reserved for its work, by resource (``{"GPU":
        ["0"]}``: the devices ``CUDA_VISIBLE_DEVICES`` names); empty in a driver."""
        raw = json.loads(os.environ.get("BERTH_INSTANCES") or "{}")
        return {name: [str(i) for i in ids] for name, ids in raw.items()}

    def __repr__(self) -> str:
        return (f"RuntimeContext(job_id={self.get_job_id()!r}, namespace={self.get_namespace()!r}, "
                f"actor_id={self.get_actor_id()!r}, task_id={self.get_task_id()!r}, "
                f"node_id={self.get_node_id()!r}, attempt={self.get_attempt()!r})")


def get_runtime_context() -> RuntimeContext:
    """This process's context (``berth.get_runtime_context().get_job_id()``); never connects."""
    return RuntimeContext()


def get_gpu_ids() -> List[int]:
    """Inside a worker, the GPU instance IDs reserved for its work (as ``ray.get_gpu_ids()``);
    empty without a GPU or in a driver."""
    return [int(i) for i in get_runtime_context().get_accelerator_ids().get("GPU", [])]
