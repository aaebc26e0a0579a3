"""Scheduling strategies and label expressions, with Ray's names (actor affinity, node-label
selectors). Each strategy checks its input when made and renders the
head's ``scheduling_strategy`` value with ``to_rest()``."""

from __future__ import annotations

import enum
from typing import Any, Dict, List, Optional, Sequence, Union

from .. import _labels
from ..exceptions import InvalidRequestError

FIELD = "scheduling_strategy"


# ---------------------------------------------------------------------------------------------
# Expressions for label selectors, tolerations and NodeLabelSchedulingStrategy.


class _Expression:
    """A label expression; ``to_rest()`` is the head's text form."""

    def __init__(self, text: str) -> None:
        self._text = text

    def to_rest(self) -> str:
        return self._text

    def __str__(self) -> str:
        return self._text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Expression) and other._text == self._text

    def __hash__(self) -> int:
        return hash(self._text)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._text!r})"


def _values(name: str, values: Sequence[Any]) -> List[str]:
    if len(values) == 1 and isinstance(values[0], (list, tuple, set)):
        values = tuple(values[0])
    if not values:
        raise InvalidRequestError(name, "needs at least one value")
    for v in values:
        if not isinstance(v, str):
            raise InvalidRequestError(name, f"values are strings, not {v!r}")
        try:
            _labels._check_expression_value(v)
        except ValueError as e:
            raise InvalidRequestError(name, str(e)) from None
    return list(dict.fromkeys(values))


class In(_Expression):
    """The label has one of these values: ``In("a", "b")`` is ``"in(a,b)"``."""

    def __init__(self, *values: str) -> None:
        self.values = _values("In", values)
        super().__init__("in(" + ",".join(self.values) + ")")


class NotIn(_Expression):
    """The label has none of these values (or is absent): ``"!in(a,b)"``."""

    def __init__(self, *values: str) -> None:
        self.values = _values("NotIn", values)
        super().__init__("!in(" + ",".join(self.values) + ")")


class Exists(_Expression):
    """The label is present, whatever its value: ``"exists()"``."""

    def __init__(self) -> None:
        super().__init__("exists()")


class DoesNotExist(_Expression):
    """The label is absent: ``"!exists()"``."""

    def __init__(self) -> None:
        super().__init__("!exists()")


class Equal(_Expression):
    """The label equals this value: ``"v"``."""

    def __init__(self, value: str) -> None:
        super().__init__(_values("Equal", (value,))[0])


class NotEqual(_Expression):
    """The label is anything but this value (or absent): ``"!v"``."""

    def __init__(self, value: str) -> None:
        super().__init__("!" + _values("NotEqual", (value,))[0])


# ---------------------------------------------------------------------------------------------
# Actor affinity.


class ActorAffinityOperator(str, enum.Enum):
    """How an expression matches actor labels: IN and EXISTS attract, NOT_IN and
    DOES_NOT_EXIST repel."""

    IN = "IN"
    NOT_IN = "NOT_IN"
    EXISTS = "EXISTS"
    DOES_NOT_EXIST = "DOES_NOT_EXIST"


def _operator(field: str, operator: Any) -> ActorAffinityOperator:
    if isinstance(operator, ActorAffinityOperator):
        return operator
    if isinstance(operator, str):
        try:
            return ActorAffinityOperator(operator.strip().upper())
        except ValueError:
            pass
    raise InvalidRequestError(
        field, f"unknown operator {operator!r}; use IN, NOT_IN, EXISTS or DOES_NOT_EXIST".replace(
            repr(operator), _labels._q(str(operator))))


class ActorAffinityMatchExpression:
    """Actors whose label ``key`` has one of ``values`` (IN, NOT_IN) or is present at all
    (EXISTS, DOES_NOT_EXIST); ``soft`` expressions only prefer; ``topology_key`` (a node label
    such as ``berth.io/availability-zone``) widens "the node" to its zone."""

    def __init__(self, key: str, operator: Union[ActorAffinityOperator, str], values: Optional[List[str]] = None,
                 soft: bool = False, topology_key: Optional[str] = None) -> None:
        self.key = key
        self.operator = _operator("operator", operator)
        self.values = list(values or [])
        self.soft = soft
        self.topology_key = topology_key
        self._check(f"{FIELD}.expressions[0]")

    def _check(self, field: str) -> None:
        _labels.check_key(f"{field}.key", self.key)
        if not isinstance(self.soft, bool):
            raise InvalidRequestError(f"{field}.soft", f"must be True or False, not {self.soft!r}")
        # In the head's order: the key, the values, the topology key, then their number.
        for i, v in enumerate(self.values):
            _labels.check_value(f"{field}.values[{i}]", self.key, v)
        if self.topology_key is not None:
            _labels.check_key(f"{field}.topology_key", self.topology_key)
        needs_values = self.operator in (ActorAffinityOperator.IN, ActorAffinityOperator.NOT_IN)
        if needs_values and not self.values:
            raise InvalidRequestError(f"{field}.values", f"{self.operator.value} needs at least one value")
        if not needs_values and self.values:
            raise InvalidRequestError(f"{field}.values", f"{self.operator.value} takes no values")

    def to_rest(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"key": self.key, "operator": self.operator.value, "soft": self.soft}
        if self.values:
            out["values"] = list(self.values)
        if self.topology_key:
            out["topology_key"] = self.topology_key
        return out

    def __repr__(self) -> str:
        return (f"ActorAffinityMatchExpression({self.key!r}, {self.operator.value}, {self.values!r}, "
                f"soft={self.soft})")


class ActorAffinitySchedulingStrategy:
    """Place with or away from actors by their labels; every expression must hold (or any one,
    with ``is_or_semantics=True``, the OR form)."""

    def __init__(self, match_expressions: List[ActorAffinityMatchExpression], is_or_semantics: bool = False,
                 on_peer_moved: str = "stay") -> None:
        if not isinstance(match_expressions, (list, tuple)) or not match_expressions:
            raise InvalidRequestError(f"{FIELD}.expressions", "give at least one ActorAffinityMatchExpression")
        for i, e in enumerate(match_expressions):
            if not isinstance(e, ActorAffinityMatchExpression):
                raise InvalidRequestError(f"{FIELD}.expressions[{i}]", f"{e!r} is not an ActorAffinityMatchExpression")
            e._check(f"{FIELD}.expressions[{i}]")
        if on_peer_moved not in ("stay", "follow"):
            raise InvalidRequestError(f"{FIELD}.on_peer_moved", f"{on_peer_moved!r} is not stay or follow")
        self.match_expressions = list(match_expressions)
        self.is_or_semantics = bool(is_or_semantics)
        self.on_peer_moved = on_peer_moved

    def to_rest(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"type": "ACTOR_AFFINITY",
                               "expressions": [e.to_rest() for e in self.match_expressions],
                               "match": "any" if self.is_or_semantics else "all"}
        if self.on_peer_moved != "stay":
            out["on_peer_moved"] = self.on_peer_moved
        return out


# ---------------------------------------------------------------------------------------------
# Nodes.


class NodeAffinitySchedulingStrategy:
    """Run on one node (``soft``: prefer it). ``_spill_on_unavailable`` (soft): go elsewhere when it
    is busy; ``_fail_on_unavailable`` (hard): fail instead of waiting."""

    def __init__(self, node_id: str, soft: bool, _spill_on_unavailable: bool = False,
                 _fail_on_unavailable: bool = False, *, spill_on_unavailable: Optional[bool] = None,
                 fail_on_unavailable: Optional[bool] = None) -> None:
        if not isinstance(node_id, str) or not node_id:
            raise InvalidRequestError(f"{FIELD}.node_id", "must be a node ID")
        self.node_id, self.soft = node_id, bool(soft)
        self.spill = bool(_spill_on_unavailable if spill_on_unavailable is None else spill_on_unavailable)
        self.fail = bool(_fail_on_unavailable if fail_on_unavailable is None else fail_on_unavailable)
        if self.spill and not self.soft:
            raise InvalidRequestError(f"{FIELD}.spill_on_unavailable", "only with soft=True")
        if self.fail and self.soft:
            raise InvalidRequestError(f"{FIELD}.fail_on_unavailable", "only with soft=False")

    def to_rest(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"type": "NODE_AFFINITY", "node_id": self.node_id, "soft": self.soft}
        if self.spill:
            out["spill_on_unavailable"] = True
        if self.fail:
            out["fail_on_unavailable"] = True
        return out


class NodeLabelSchedulingStrategy:
    """The node-label strategy: ``hard`` must hold, ``soft`` is preferred. Values are
    expressions (``In("a")``, ``DoesNotExist()``) or their text (``"in(a)"``)."""

    def __init__(self, hard: Optional[Dict[str, Any]] = None, soft: Optional[Dict[str, Any]] = None) -> None:
        if not hard and not soft:
            raise InvalidRequestError(FIELD, "NODE_LABEL needs hard, soft or both")
        self.hard = _labels.selector(f"{FIELD}.hard", hard)
        self.soft = _labels.selector(f"{FIELD}.soft", soft)

    def to_rest(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"type": "NODE_LABEL"}
        if self.hard:
            out["hard"] = dict(self.hard)
        if self.soft:
            out["soft"] = dict(self.soft)
        return out


class PlacementGroupSchedulingStrategy:
    """Run inside a placement group's bundle (``placement_group_bundle_index``, or -1: any)."""

    def __init__(self, placement_group: Any, placement_group_bundle_index: int = -1,
                 placement_group_capture_child_tasks: Optional[bool] = None) -> None:
        group = placement_group if isinstance(placement_group, str) else getattr(placement_group, "id", None)
        if not isinstance(group, str) or not group:
            raise InvalidRequestError(f"{FIELD}.group", f"{placement_group!r} is not a placement group")
        if not isinstance(placement_group_bundle_index, int) or placement_group_bundle_index < -1:
            raise InvalidRequestError(f"{FIELD}.bundle",
                                      f"{placement_group_bundle_index!r} is not a bundle index (0, 1, ... or -1: any)")
        count = getattr(placement_group, "bundle_count", None)
        if isinstance(count, int) and placement_group_bundle_index >= count:
            raise InvalidRequestError(f"{FIELD}.bundle",
                                      f"{placement_group_bundle_index} is past the group's {count} bundles")
        self.placement_group = placement_group
        self.group_id = group
        self.bundle_index = placement_group_bundle_index

    def to_rest(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"type": "PLACEMENT_GROUP", "group": self.group_id}
        if self.bundle_index >= 0:
            out["bundle"] = self.bundle_index
        return out


SchedulingStrategyT = Union[None, str, PlacementGroupSchedulingStrategy, NodeAffinitySchedulingStrategy,
                            NodeLabelSchedulingStrategy, ActorAffinitySchedulingStrategy]


def to_rest(strategy: Any) -> Any:
    """A ``scheduling_strategy`` option as the head's value."""
    if strategy is None:
        return None
    if isinstance(strategy, str):
        name = strategy.strip().upper()
        if name not in ("DEFAULT", "SPREAD", "RANDOM"):
            raise InvalidRequestError(FIELD, f"unknown strategy {strategy!r}; use DEFAULT, SPREAD, RANDOM or a "
                                             "strategy object (NodeAffinitySchedulingStrategy, ...)")
        return name
    if hasattr(strategy, "to_rest"):
        return strategy.to_rest()
    raise InvalidRequestError(FIELD, f"{strategy!r} is not a scheduling strategy")


__all__ = [
    "ActorAffinityMatchExpression", "ActorAffinityOperator", "ActorAffinitySchedulingStrategy",
    "DoesNotExist", "Equal", "Exists", "In", "NodeAffinitySchedulingStrategy", "NodeLabelSchedulingStrategy",
    "NotEqual", "NotIn", "PlacementGroupSchedulingStrategy", "SchedulingStrategyT",
]
