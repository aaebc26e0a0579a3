"""Placement groups: atomic reservations of resource bundles (``berth.util.placement_group``)."""

from __future__ import annotations

import time
from typing import Any, Dict, List, Optional

from .. import _options, _runtime
from .._client import path_id
from .._objects import ObjectRef, Stall, _shorter, resolved_ref
from ..exceptions import GetTimeoutError, PlacementGroupError


class PlacementGroup:
    """A placement group the head accepted; ``ready()`` resolves once every bundle is
    reserved."""

    def __init__(self, group_id: str, bundle_specs: List[Dict[str, float]], record: Optional[Dict[str, Any]] = None):
        self.id = group_id
        self.bundle_specs = bundle_specs
        self._record = record or {}

    @property
    def bundle_count(self) -> int:
        """How many bundles it has."""
        return len(self.bundle_specs)

    def _wait_once(self, timeout: float) -> Optional[Dict[str, Any]]:
        client = _runtime.current().client
        status, answer = client.request(
            "GET", f"/api/v1/placement_groups/{path_id(self.id)}/wait", query={"timeout_s": timeout},
            timeout=timeout + 30, allow=(408,))
        if status == 408:
            return None
        self._record = answer
        if answer["state"] == "REMOVED":
            raise PlacementGroupError(f"placement group {self.id} was removed")
        return answer

    def wait(self, timeout_seconds: float = 30) -> bool:
        """True once every bundle is reserved; False if that did not happen within
        ``timeout_seconds``. Warns (``BerthInfeasibleWarning``) when the head says the group
        cannot be placed, 5 s in."""
        deadline = time.monotonic() + timeout_seconds
        stall = Stall()
        while True:
            left = max(0.0, deadline - time.monotonic())
            if self._wait_once(_shorter(min(left, 30.0), stall.until_next())) is not None:
                return True
            if time.monotonic() >= deadline:
                return False
            if stall.due():
                stall.check([(self.id, self.id)])

    def ready(self) -> ObjectRef:
        """An ``ObjectRef`` resolved with this group once it is reserved (``berth.get(pg.ready())``)."""

        def until_created() -> "PlacementGroup":
            while self._wait_once(30.0) is None:
                pass
            return self

        return resolved_ref(f"{self.id}.ready", until_created, work_id=self.id)

    def table(self) -> Dict[str, Any]:
        """The group as the head shows it now (state, bundles and their nodes)."""
        self._record = _runtime.current().client.get(f"/api/v1/placement_groups/{path_id(self.id)}")
        return self._record

    def __repr__(self) -> str:
        return f"PlacementGroup({self.id}, {self.bundle_count} bundles)"

    def __reduce__(self):
        return (PlacementGroup, (self.id, self.bundle_specs))


def placement_group(bundles: List[Dict[str, float]], strategy: str = "PACK", name: str = "",
                    lifetime: Optional[str] = None, *, bundle_label_selector: Optional[List[Dict[str, Any]]] = None,
                    tolerations: Optional[Dict[str, Any]] = None,
                    fallback_strategy: Optional[List[Dict[str, Any]]] = None,
                    namespace: Optional[str] = None) -> PlacementGroup:
    """Reserves ``bundles`` atomically (PACK, SPREAD, STRICT_PACK or STRICT_SPREAD), each bundle
    on a node matching its ``bundle_label_selector``, tolerating ``tolerations``; tries each
    ``fallback_strategy`` alternative in order when the first cannot be placed. Bad input is
    refused here (``ValueError``) with the head's field names."""
    body = _options.group_body(bundles, strategy=strategy, name=name or None, namespace=namespace,
                               bundle_label_selector=bundle_label_selector, tolerations=tolerations,
                               fallback_strategy=fallback_strategy, lifetime=lifetime)
    runtime = _runtime.current()
    body.setdefault("namespace", runtime.namespace)
    body.update(runtime.ownership())
    record = runtime.client.create("/api/v1/placement_groups", body)
    return PlacementGroup(record["group_id"], [dict(b) for b in bundles], record)


def remove_placement_group(placement_group: PlacementGroup) -> None:
    """Removes the group; what runs in its bundles is stopped."""
    _runtime.current().client.request("DELETE", f"/api/v1/placement_groups/{path_id(placement_group.id)}")


def get_placement_group(name: str, namespace: Optional[str] = None) -> PlacementGroup:
    """The live placement group named ``name`` (in ``namespace``, default this driver's)."""
    runtime = _runtime.current()
    ns = namespace or runtime.namespace
    groups = runtime.client.get("/api/v1/placement_groups", namespace=ns)["items"]
    live = [g for g in groups if g.get("name") == name and g["state"] != "REMOVED"]
    if not live:
        raise ValueError(f"no placement group named {name!r} in namespace {ns!r}")
    g = live[0]
    return PlacementGroup(g["group_id"], [dict(b.get("resources", {})) for b in g.get("bundles", [])], g)


__all__ = ["PlacementGroup", "placement_group", "remove_placement_group", "get_placement_group", "GetTimeoutError"]
