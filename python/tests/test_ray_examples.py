"""Every Python example of seeds 000, 003 and 004, as the seeds write them with `import berth`
for `import ray` (and `berth.io/` for the `ray.io/` label prefix), on a real cluster; each
checks where the work went.

The test cluster (examples/local/sdk-tests.yaml): cpu-a (zone us-west4-a, spot, m5.16xlarge), cpu-b (zone
us-central2-b, on-demand), gpu-a (4 A100, us-west4-a) and gpu-b (4 H100, custom_resource 2,
us-central2-b); both GPU nodes carry the taint gpu_node=true.
"""

from __future__ import annotations

import os

import pytest

import berth
from berth import DoesNotExist, Exists, In, NotIn
from berth.util.placement_group import remove_placement_group
from berth.util.scheduling_strategies import (
    ActorAffinityMatchExpression,
    ActorAffinityOperator,
    ActorAffinitySchedulingStrategy,
    NodeLabelSchedulingStrategy,
    PlacementGroupSchedulingStrategy,
)

CPU_NODES = {"cpu-a", "cpu-b"}


@berth.remote
class Actor:
    def node(self):
        return os.environ["BERTH_NODE_ID"]


@berth.remote
def node_of_task():
    return os.environ["BERTH_NODE_ID"]


def node(actor) -> str:
    return berth.get(actor.node.remote(), timeout=60)


@pytest.fixture
def untainted_gpu_b(berth_session):
    """Seed 003's GPU examples ask for GPU nodes without tolerations: take gpu-b's taint off
    for the test (seed 004's dynamic taints) and put it back after."""
    berth.taint(node_id="gpu-b", remove={"gpu_node": "true"})
    yield
    berth.taint(node_id="gpu-b", append={"gpu_node": "true"})


# ---------------------------------------------------------------------------------------------
# Seed 000: actor labels, affinity and anti-affinity.


def test_seed_000_affinity_in(berth_session):
    actor_1 = Actor.options(labels={"location": "dc_1"}).remote()
    match_expressions = [
        ActorAffinityMatchExpression("location", ActorAffinityOperator.IN, ["dc_1"], False)
    ]
    actor_affinity_strategy = ActorAffinitySchedulingStrategy(match_expressions)
    actor = Actor.options(scheduling_strategy=actor_affinity_strategy).remote()
    assert node(actor) == node(actor_1)


def test_seed_000_anti_affinity_not_in(berth_session):
    actor_1 = Actor.options(labels={"location": "dc_1"}).remote()
    match_expressions = [
        ActorAffinityMatchExpression("location", ActorAffinityOperator.NOT_IN, ["dc_1"], False)
    ]
    actor_affinity_strategy = ActorAffinitySchedulingStrategy(match_expressions)
    actor = Actor.options(scheduling_strategy=actor_affinity_strategy).remote()
    assert node(actor) != node(actor_1)
    assert node(actor) in CPU_NODES


def test_seed_000_affinity_exists(berth_session):
    actor_1 = Actor.options(labels={"location": "dc_1"}).remote()
    match_expressions = [
        ActorAffinityMatchExpression("location", ActorAffinityOperator.EXISTS, [], False)
    ]
    actor_affinity_strategy = ActorAffinitySchedulingStrategy(match_expressions)
    actor = Actor.options(scheduling_strategy=actor_affinity_strategy).remote()
    assert node(actor) == node(actor_1)


def test_seed_000_anti_affinity_does_not_exist(berth_session):
    actor_1 = Actor.options(labels={"location": "dc_1"}).remote()
    match_expressions = [
        ActorAffinityMatchExpression("location", ActorAffinityOperator.DOES_NOT_EXIST, [], False)
    ]
    actor_affinity_strategy = ActorAffinitySchedulingStrategy(match_expressions)
    actor = Actor.options(scheduling_strategy=actor_affinity_strategy).remote()
    assert node(actor) != node(actor_1)


def test_seed_000_several_expressions_all_hold(berth_session):
    located = Actor.options(labels={"location": "dc_1"}).remote()
    versioned = Actor.options(
        labels={"version": "1.0.0"},
        scheduling_strategy=ActorAffinitySchedulingStrategy(
            [ActorAffinityMatchExpression("location", ActorAffinityOperator.DOES_NOT_EXIST, [], False)]
        ),
    ).remote()
    match_expressions = [
        ActorAffinityMatchExpression("location", ActorAffinityOperator.DOES_NOT_EXIST, [], False),
        ActorAffinityMatchExpression("version", ActorAffinityOperator.EXISTS, [], False),
    ]
    actor_affinity_strategy = ActorAffinitySchedulingStrategy(match_expressions)
    actor = Actor.options(scheduling_strategy=actor_affinity_strategy).remote()
    assert node(actor) == node(versioned) != node(located)


def test_seed_000_an_expression_that_cannot_hold_yet_waits(berth_session):
    match_expressions = [
        ActorAffinityMatchExpression("location", ActorAffinityOperator.IN, ["dc_9"], False)
    ]
    waiting = Actor.options(scheduling_strategy=ActorAffinitySchedulingStrategy(match_expressions)).remote()
    ready, _ = berth.wait([waiting.node.remote()], timeout=1.0)
    assert ready == []
    why = berth.explain(waiting)
    assert "actor_affinity" in str(why), why
    # The peer appears: the pending actor is placed with it (seed 000's pending queue).
    peer = Actor.options(labels={"location": "dc_9"}).remote()
    assert node(waiting) == node(peer)


# ---------------------------------------------------------------------------------------------
# Seed 003: node labels, label selectors, fallbacks, bundle label selectors.


def test_seed_003_node_labels(berth_session):
    labels = {n["NodeID"]: n["Labels"] for n in berth.nodes()}
    assert labels["gpu-b"]["berth.io/accelerator-type"] == "nvidia-h100"
    assert labels["cpu-a"]["berth.io/availability-zone"] == "us-west4-a"
    assert labels["cpu-a"]["berth.io/market-type"] == "spot"
    assert labels["cpu-a"]["instance_type"] == "m5.16xlarge"
    assert labels["cpu-b"]["berth.io/node-id"] == "cpu-b"


def test_seed_003_node_label_strategy(berth_session):
    actor = Actor.options(
        scheduling_strategy=NodeLabelSchedulingStrategy({"berth.io/availability-zone": In("us-central2-b")})
    ).remote()
    assert node(actor) == "cpu-b"


def test_seed_003_node_label_strategy_hard_and_soft(berth_session):
    actor = Actor.options(
        scheduling_strategy=NodeLabelSchedulingStrategy(
            hard={"berth.io/market-type": NotIn("spot")},
            soft={"berth.io/availability-zone": In("us-central2-b")},
        )
    ).remote()
    assert node(actor) == "cpu-b"
    # The seed's first form; CPU-only nodes have an empty berth.io/accelerator-type (seed 003's
    # default labels), so "not an A100 or T100" holds there and on gpu-b.
    other = Actor.options(
        scheduling_strategy=NodeLabelSchedulingStrategy(
            hard={"berth.io/accelerator-type": NotIn("nvidia-a100", "nvidia-t100"), "other_key": DoesNotExist()},
            soft={"berth.io/market-type": In("spot")},
        )
    ).remote()
    assert node(other) == "cpu-a"


def test_seed_003_label_selector_on_a_class(untainted_gpu_b):
    @berth.remote(label_selector={"berth.io/accelerator-type": "nvidia-h100"})
    class Actor:
        def node(self):
            return os.environ["BERTH_NODE_ID"]

    assert node(Actor.remote()) == "gpu-b"


def test_seed_003_label_selector_on_a_task(berth_session):
    @berth.remote(label_selector={"berth.io/market-type": "spot"})
    def my_task():
        return os.environ["BERTH_NODE_ID"]

    assert berth.get([my_task.remote() for _ in range(4)], timeout=120) == ["cpu-a"] * 4


def test_seed_003_label_selector_in_options(untainted_gpu_b):
    actor_1 = Actor.options(
        num_gpus=1,
        resources={"custom_resource": 1},
        label_selector={"berth.io/accelerator-type": "nvidia-h100"},
    ).remote()
    assert node(actor_1) == "gpu-b"


def test_seed_003_selector_operators(berth_session):
    cases = {
        "!spot": "cpu-b",
        "in(spot,preemptible)": "cpu-a",
        "!in(spot)": "cpu-b",
    }
    for expression, expected in cases.items():
        got = berth.get(node_of_task.options(label_selector={"berth.io/market-type": expression}).remote(), timeout=60)
        assert got == expected, expression
    assert berth.get(node_of_task.options(label_selector={"instance_type": "exists()"}).remote(), timeout=60) in CPU_NODES
    assert berth.get(node_of_task.options(label_selector={"gpu_type": "!exists()"}).remote(), timeout=60) in CPU_NODES
    assert berth.get(
        node_of_task.options(label_selector={"berth.io/market-type": "exists(),!in(on-demand)"}).remote(), timeout=60
    ) == "cpu-a"


def test_seed_003_fallback_strategy(berth_session):
    @berth.remote(
        label_selector={"instance_type": "m5.32xlarge"},
        fallback_strategy=[
            # Fall back to an empty set of labels (no constraints).
            # This is equivalent to a "soft" constraint for an m5.32xlarge.
            {"label_selector": {}},
        ],
    )
    def anywhere():
        return os.environ["BERTH_NODE_ID"]

    assert berth.get(anywhere.remote(), timeout=60) in CPU_NODES

    @berth.remote(label_selector={"instance_type": "m5.16xlarge"}, fallback_strategy=[{"label_selector": {}}])
    def preferred():
        return os.environ["BERTH_NODE_ID"]

    assert berth.get(preferred.remote(), timeout=60) == "cpu-a"


def test_seed_003_bundle_label_selector_same_on_all(untainted_gpu_b):
    # Same labels on all bundles
    pg = berth.util.placement_group(
        bundles=[{"GPU": 1}, {"GPU": 1}],
        bundle_label_selector=[{"berth.io/availability-zone": "us-central2-b"}] * 2,
    )
    assert pg.wait(60)
    assert [b["node_id"] for b in pg.table()["bundles"]] == ["gpu-b", "gpu-b"]
    remove_placement_group(pg)


def test_seed_003_bundle_label_selector_per_bundle(untainted_gpu_b):
    # Different bundles requiring different labels
    pg = berth.util.placement_group(
        bundles=[{"CPU": 1}] + [{"GPU": 1}] * 2,
        bundle_label_selector=[{"berth.io/market-type": "spot"}]
        + [{"berth.io/accelerator-type": "nvidia-h100"}] * 2,
    )
    berth.get(pg.ready(), timeout=60)
    assert [b["node_id"] for b in pg.table()["bundles"]] == ["cpu-a", "gpu-b", "gpu-b"]
    # Work placed into a bundle runs there.
    where = node_of_task.options(
        num_cpus=1,
        scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=0),
    ).remote()
    assert berth.get(where, timeout=60) == "cpu-a"
    remove_placement_group(pg)


def test_seed_003_placement_group_fallback(untainted_gpu_b):
    # Prefer 2 H100s, fall back to 4 A100s, then fall back to 8 V100s:
    pg = berth.util.placement_group(
        bundles=[{"GPU": 1}] * 2,
        bundle_label_selector=[{"berth.io/accelerator-type": "nvidia-h100"}] * 2,
        fallback_strategy=[
            {
                "bundles": [{"GPU": 1}] * 4,
                "bundle_label_selector": [{"berth.io/accelerator-type": "nvidia-a100"}] * 4,
            },
            {
                "bundles": [{"GPU": 1}] * 8,
                "bundle_label_selector": [{"berth.io/accelerator-type": "nvidia_v100"}] * 8,
            },
        ],
    )
    berth.get(pg.ready(), timeout=60)
    table = pg.table()
    assert [b["node_id"] for b in table["bundles"]] == ["gpu-b", "gpu-b"]
    remove_placement_group(pg)


# ---------------------------------------------------------------------------------------------
# Seed 004: taints and tolerations.


def test_seed_004_ordinary_work_stays_off_tainted_nodes(berth_session):
    actor = Actor.options(num_cpus=1).remote()
    assert node(actor) in CPU_NODES
    pg = berth.util.placement_group(bundles=[{"CPU": 1}])
    berth.get(pg.ready(), timeout=60)
    assert pg.table()["bundles"][0]["node_id"] in CPU_NODES


def test_seed_004_tolerations_reach_the_gpu_nodes(berth_session):
    actor = Actor.options(num_gpus=1, tolerations={"gpu_node": Exists()}).remote()
    assert node(actor) in {"gpu-a", "gpu-b"}
    pg = berth.util.placement_group(bundles=[{"GPU": 1}], tolerations={"gpu_node": Exists()})
    berth.get(pg.ready())
    assert pg.table()["bundles"][0]["node_id"] in {"gpu-a", "gpu-b"}


def test_seed_004_toleration_forms(berth_session):
    Task = node_of_task
    ref = Task.options(tolerations={"gpu_type": In("A100")}).remote()
    assert berth.get(ref, timeout=60) in CPU_NODES, "a toleration allows, it does not attract"
    actor = Actor.options(tolerations={"gpu_type": In("A100"), "memory-pressure": Exists()}).remote()
    assert node(actor) in CPU_NODES
    gpu = Actor.options(num_gpus=0.5, tolerations={"gpu_node": In("true")}).remote()
    assert node(gpu) in {"gpu-a", "gpu-b"}


def test_seed_004_dynamic_taint_isolates_a_node(berth_session):
    berth.taint(node_id="cpu-a", append={"memory-pressure": "high"})
    try:
        refs = [node_of_task.remote() for _ in range(6)]
        assert set(berth.get(refs, timeout=120)) == {"cpu-b"}
        tolerant = node_of_task.options(
            tolerations={"memory-pressure": Exists()}, label_selector={"berth.io/node-id": "cpu-a"}
        ).remote()
        assert berth.get(tolerant, timeout=60) == "cpu-a"
    finally:
        berth.taint(node_id="cpu-a", remove={"memory-pressure": "high"})
    assert "memory-pressure" not in {n["NodeID"]: n for n in berth.nodes()}["cpu-a"]["Taints"]
