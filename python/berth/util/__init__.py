"""``berth.util``: placement groups and scheduling strategies.

``berth.util.placement_group(...)`` is the function (as ``ray.util.placement_group``); the module
of the same name stays importable (``from berth.util.placement_group import ...``)."""

from . import scheduling_strategies
from .placement_group import (
    PlacementGroup,
    get_placement_group,
    placement_group,
    remove_placement_group,
)

__all__ = ["PlacementGroup", "get_placement_group", "placement_group", "remove_placement_group",
           "scheduling_strategies"]
