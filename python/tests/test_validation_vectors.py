"""The shared validation vectors (crates/berth-core/tests/vectors/validation.json), checked
against the SDK's client-side rules: each input gets the verdict the Rust code (the head's)
gives it, so the two cannot drift. No cluster: the checks run in the driver.

A vector marked ``"sdk": "server"`` is one the SDK leaves to the head: its check must accept
it (the head refuses it). One whose ``inexpressible`` lists ``python`` cannot be written with
the SDK's API."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Dict, List

import pytest

from berth import _labels, _options
from berth.exceptions import InvalidRequestError
from berth.util.scheduling_strategies import ActorAffinityMatchExpression

VECTORS = Path(__file__).resolve().parents[2] / "crates" / "berth-core" / "tests" / "vectors" / "validation.json"


def _label_key(v: Dict[str, Any]) -> None:
    _labels.check_key("labels.k", v["input"])


def _label_value(v: Dict[str, Any]) -> None:
    _labels.check_value("labels.k", "k", v["input"])


def _actor_label(v: Dict[str, Any]) -> None:
    _options.actor_body({"labels": {v["input"]["key"]: v["input"]["value"]}}, "python", [], {})


def _expression(v: Dict[str, Any]) -> None:
    _labels.selector("label_selector", {"k": v["input"]})


def _selector(v: Dict[str, Any]) -> None:
    _labels.selector("label_selector", v["input"])
    _labels.selector("tolerations", v["input"])


def _affinity(v: Dict[str, Any]) -> None:
    i = v["input"]
    ActorAffinityMatchExpression(i["key"], i["operator"], i["values"])


def _resource_name(v: Dict[str, Any]) -> None:
    _labels.resource_name("resources.x", v["input"])


def _amount(v: Dict[str, Any]) -> None:
    resource = v.get("resource", "CPU")
    _labels.amount(f"resources.{resource}", resource, v["input"])


def _gpu(v: Dict[str, Any]) -> None:
    i = v["input"]
    _labels.amount(f"resources.{i['resource']}", i["resource"], i["amount"], bundle=i["in"] == "bundle")


CHECKS: Dict[str, Callable[[Dict[str, Any]], None]] = {
    "label_key": _label_key,
    "label_value": _label_value,
    "actor_label": _actor_label,
    "expression": _expression,
    "selector": _selector,
    "affinity": _affinity,
    "resource_name": _resource_name,
    "amount": _amount,
    "gpu": _gpu,
}


def _load() -> Dict[str, Any]:
    with open(VECTORS, encoding="utf-8") as f:
        return json.load(f)


def _cases() -> List[Any]:
    return [pytest.param(group, i, v, id=f"{group}[{i}]")
            for group, vectors in _load().items() if group != "about" for i, v in enumerate(vectors)]


def test_every_group_has_a_check() -> None:
    groups = {g for g in _load() if g != "about"}
    assert groups == set(CHECKS), "a group of the vectors file has no check here, or a check no group"


@pytest.mark.parametrize("group,index,vector", _cases())
def test_vector(group: str, index: int, vector: Dict[str, Any]) -> None:
    if "python" in vector.get("inexpressible", []):
        assert vector["valid"] is False, "only a refused input may be inexpressible"
        return
    check = CHECKS[group]
    expect_error = not vector["valid"] and vector.get("sdk") != "server"
    try:
        check(vector)
    except InvalidRequestError as e:
        assert expect_error, f"{group}[{index}] {vector['input']!r}: expected accepted, refused: {e}"
        assert vector["error"] in str(e), f"{group}[{index}]: expected {vector['error']!r} in the error: {e}"
        return
    assert not expect_error, f"{group}[{index}] {vector['input']!r}: expected {vector['error']!r}, accepted"
