"""``berth.get_runtime_context()``: what this process is in Berth (a subset of Ray's)."""

from __future__ import annotations

import os
import sys
from typing import Optional


class RuntimeContext:
    """IDs of this process: its job, and inside a worker its actor or task and node."""

    def get_job_id(self) -> Optional[str]:
        """The job this process's work belongs to (``job-3``): a driver's own job once
        ``berth.init()`` ran (None before), a worker's work's job (None for work that belongs
        to none, such as what the CLI creates)."""
        runtime = getattr(sys.modules.get("berth._runtime"), "_current", None)
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

    def __repr__(self) -> str:
        return (f"RuntimeContext(job_id={self.get_job_id()!r}, actor_id={self.get_actor_id()!r}, "
                f"task_id={self.get_task_id()!r}, node_id={self.get_node_id()!r})")


def get_runtime_context() -> RuntimeContext:
    """This process's IDs (``berth.get_runtime_context().get_job_id()``); never connects."""
    return RuntimeContext()
