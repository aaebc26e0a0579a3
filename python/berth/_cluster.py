"""Calls about the cluster and its objects: nodes, resources, taints, explanations, actors by
name, kills, and work that is a command instead of Python."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from . import _options, _runtime
from ._client import path_id
from ._objects import ObjectRef, resolved_ref
from ._remote import ActorHandle
from .exceptions import GetTimeoutError, InvalidRequestError, NotFoundError

_SUFFIX = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)([kMGTPE]i?|)$")


def quantity(text: Union[str, int, float]) -> float:
    """A quantity as the head writes it (``"4"``, ``"0.5"``, ``"16Gi"``) as a number."""
    if isinstance(text, (int, float)):
        return float(text)
    match = _QUANTITY.match(text.strip())
    if not match:
        raise ValueError(f"not a quantity: {text!r}")
    try:
        return float(Decimal(match.group(1)) * _SUFFIX[match.group(2)])
    except InvalidOperation:
        raise ValueError(f"not a quantity: {text!r}") from None


def nodes() -> List[Dict[str, Any]]:
    """Every node the head knows, as dicts with Ray's keys (``NodeID``, ``Alive``,
    ``NodeManagerAddress``, ``Resources``, ``Labels``) plus ``State``, ``Taints`` and
    ``Available``."""
    answer = _runtime.current().client.get("/api/v1/nodes")
    out = []
    for node in answer["items"]:
        resources = {k: quantity(v["total"]) for k, v in node.get("resources", {}).items()}
        available = {k: quantity(v["available"]) for k, v in node.get("resources", {}).items()}
        out.append({
            "NodeID": node["node_id"],
            "Alive": node["state"] != "DEAD",
            "State": node["state"],
            "NodeManagerAddress": node.get("address"),
            "Resources": resources,
            "Available": available,
            "Labels": dict(node.get("labels", {})),
            "Taints": {t["key"]: t["value"] for t in node.get("taints", [])},
        })
    return out


def _sum(key: str) -> Dict[str, float]:
    total: Dict[str, float] = {}
    for node in nodes():
        if node["State"] == "ALIVE":
            for name, amount in node[key].items():
                total[name] = total.get(name, 0.0) + amount
    return total


def cluster_resources() -> Dict[str, float]:
    """Total resources of the alive nodes, by name."""
    return _sum("Resources")


def available_resources() -> Dict[str, float]:
    """Resources free now on the alive nodes, by name."""
    return _sum("Available")


def _taint_map(value: Union[None, str, Mapping[str, str]], field: str) -> Dict[str, str]:
    if value is None:
        return {}
    if isinstance(value, str):
        pairs: Dict[str, str] = {}
        for part in filter(None, (p.strip() for p in value.split(","))):
            key, sep, val = part.partition("=")
            if not sep:
                raise InvalidRequestError(field, f"{part!r} is not key=value")
            pairs[key.strip()] = val.strip()
        return pairs
    if isinstance(value, Mapping):
        return {str(k): str(v) for k, v in value.items()}
    raise InvalidRequestError(field, "must be a dict of taint key to value, or 'key=value,...'")


def taint(node_id: Optional[str] = None, *, node_ip: Optional[str] = None,
          append: Union[None, str, Mapping[str, str]] = None,
          remove: Union[None, str, Mapping[str, str]] = None) -> Dict[str, Any]:
    """Adds (``append``) or removes (``remove``) taints of a node named by ``node_id`` or
    ``node_ip`` (as ``ray taint`` does); returns the node as the head shows it."""
    if (node_id is None) == (node_ip is None):
        raise InvalidRequestError("node_id", "give exactly one of node_id and node_ip")
    if (append is None) == (remove is None):
        raise InvalidRequestError("append", "give exactly one of append and remove")
    node = node_id if node_id is not None else node_ip
    client = _runtime.current().client
    path = f"/api/v1/nodes/{path_id(str(node))}/taints"
    if append is not None:
        return client.post(path, _taint_map(append, "append"))
    return client.delete(path, _taint_map(remove, "remove"))


def _work_id(target: Union[ObjectRef, ActorHandle, str, Any]) -> str:
    if isinstance(target, ActorHandle):
        return target.actor_id
    if isinstance(target, ObjectRef):
        if not target._state.bound.wait(30) and target.work_id is None:
            if target._state.error is not None:
                raise ValueError(f"{target!r} never reached the head: {target._state.error}")
            raise ValueError(f"{target!r} has not reached the head after 30 s")
        return str(target.work_id)
    if isinstance(target, str):
        return target
    group = getattr(target, "id", None)
    if isinstance(group, str):
        return group
    raise TypeError(f"expected an ObjectRef, ActorHandle, PlacementGroup or ID, not {type(target).__name__}")


def explain(target) -> Dict[str, Any]:
    """Why a task, actor or placement group is where it is, or why it waits: the head's
    diagnosis (``summary``, ``reasons`` per node count...)."""
    return _runtime.current().client.get(f"/api/v1/explain/{path_id(_work_id(target))}")


def kill(actor: ActorHandle, *, no_restart: bool = True) -> None:
    """Kills an actor for good; calls waiting on it fail with ``ActorDiedError``."""
    if not isinstance(actor, ActorHandle):
        raise TypeError(f"kill() takes an ActorHandle, not {type(actor).__name__}")
    _runtime.current().client.request("DELETE", f"/api/v1/actors/{path_id(actor.actor_id)}")
    from ._remote import actor_died
    from .exceptions import ActorDiedError

    actor_died(actor.actor_id, ActorDiedError(actor.actor_id, "killed by berth.kill()"))


def cancel(ref: ObjectRef) -> None:
    """Cancels the task behind ``ref`` (its process is stopped); ``get`` raises
    ``TaskCancelledError``."""
    _runtime.current().client.post(f"/api/v1/tasks/{path_id(_work_id(ref))}/cancel")


def get_actor(name: str, namespace: Optional[str] = None) -> ActorHandle:
    """The live actor named ``name`` in ``namespace`` (default: this driver's); raises
    ``ValueError`` when there is none."""
    if not isinstance(name, str) or not name:
        raise InvalidRequestError("name", "must be a non-empty string")
    runtime = _runtime.current()
    ns = namespace or runtime.namespace
    actors = runtime.client.get("/api/v1/actors", namespace=ns)["items"]
    live = [a for a in actors if a.get("name") == name and a["state"] != "DEAD"]
    if not live:
        raise ValueError(f"no live actor named {name!r} in namespace {ns!r}")
    actor = live[0]
    answer = runtime.client.request(
        "GET", f"/api/v1/actors/{path_id(actor['actor_id'])}/endpoint", query={"timeout_s": 0}, allow=(408,)
    )[1]
    key = answer.get("work_key") if isinstance(answer, dict) else None
    if key is None:
        # Not listening yet: the key comes with the endpoint; ask once more, waiting.
        answer = runtime.client.request(
            "GET", f"/api/v1/actors/{path_id(actor['actor_id'])}/endpoint", query={"timeout_s": 30},
            timeout=60, allow=(408,))[1]
        key = answer.get("work_key") if isinstance(answer, dict) else None
    if key is None:
        raise ValueError(f"actor {name!r} ({actor['actor_id']}) has not started yet; try again")
    return ActorHandle(actor["actor_id"], key, name, None, ns, name)


class Process:
    """An actor or task that is a command (what ``berth actor create`` / ``berth task submit``
    start), made by :func:`process`."""

    def __init__(self, kind: str, record: Dict[str, Any]) -> None:
        self.kind = kind
        self.id: str = record["actor_id" if kind == "actor" else "task_id"]
        self.record = record

    def _path(self) -> str:
        return f"/api/v1/{self.kind}s/{path_id(self.id)}"

    def refresh(self) -> Dict[str, Any]:
        """The object as the head shows it now."""
        self.record = _runtime.current().client.get(self._path())
        return self.record

    @property
    def state(self) -> str:
        """Its state now (``PENDING``, ``RUNNING``, ``ALIVE``, ``FINISHED``...)."""
        return self.refresh()["state"]

    def wait(self, timeout: Optional[float] = None) -> Dict[str, Any]:
        """Tasks: waits until it ended (``GetTimeoutError`` after ``timeout`` s) and returns it."""
        if self.kind != "task":
            raise TypeError("wait() is for tasks; an actor runs until killed")
        import time

        client = _runtime.current().client
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = 30.0 if deadline is None else min(30.0, max(0.0, deadline - time.monotonic()))
            answer = client.request("POST", "/api/v1/tasks:wait", {"task_ids": [self.id], "timeout_s": left},
                                    timeout=left + 30)[1]
            if answer["ended"]:
                self.record = answer["ended"][0]
                return self.record
            if answer["unknown"]:
                raise NotFoundError(404, "not_found", f"task {self.id} is no longer known to the head")
            if deadline is not None and time.monotonic() >= deadline:
                raise GetTimeoutError(f"task {self.id} has not ended after {timeout} s")

    def ref(self) -> ObjectRef:
        """An ``ObjectRef`` resolved with the task's final record when it ends."""
        return resolved_ref(self.id, self.wait)

    def kill(self) -> None:
        """Kills the actor or cancels the task."""
        client = _runtime.current().client
        if self.kind == "actor":
            client.request("DELETE", self._path())
        else:
            client.post(f"{self._path()}/cancel")

    def __repr__(self) -> str:
        return f"Process({self.kind}, {self.id})"


def process(argv: Sequence[str], *, actor: bool = False, env: Optional[Mapping[str, str]] = None,
            **options: Any) -> Process:
    """Runs a command as a task (or, with ``actor=True``, as an actor), with the same options
    as ``@berth.remote``: ``berth.process(["python", "train.py"], num_gpus=1,
    label_selector={...})``."""
    if isinstance(argv, str) or not argv or not all(isinstance(a, str) for a in argv):
        raise InvalidRequestError("command", "argv must be a non-empty list of strings")
    kind = "actor" if actor else "task"
    checked = _options.validate_options(dict(options), kind)
    make = _options.actor_body if actor else _options.task_body
    body = make(checked, argv[0], list(argv[1:]), dict(env or {}))
    runtime = _runtime.current()
    body.setdefault("namespace", runtime.namespace)
    body.update(runtime.ownership())
    record = runtime.client.create(f"/api/v1/{kind}s", body)
    return Process(kind, record)
