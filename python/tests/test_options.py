"""Options and their checks, without a cluster: the bodies the head receives, and bad input
refused in Python with the head's field names and rules."""

from __future__ import annotations

import pytest

from berth import _options
from berth.exceptions import InvalidRequestError, TaskError
from berth.util.scheduling_strategies import (
    ActorAffinityMatchExpression,
    ActorAffinityOperator,
    ActorAffinitySchedulingStrategy,
    DoesNotExist,
    Exists,
    In,
    NodeAffinitySchedulingStrategy,
    NodeLabelSchedulingStrategy,
    NotIn,
    PlacementGroupSchedulingStrategy,
)


def task(**options):
    return _options.task_body(_options.validate_options(options, "task"), "python", ["-m", "w"], {})


def actor(**options):
    return _options.actor_body(_options.validate_options(options, "actor"), "python", [], {})


def refused(field, fragment, make, *args, **kwargs):
    with pytest.raises(InvalidRequestError) as info:
        make(*args, **kwargs)
    assert isinstance(info.value, ValueError)
    assert info.value.field == field, str(info.value)
    assert fragment in info.value.rule, str(info.value)
    return info.value


def test_resources_and_defaults():
    assert task()["resources"] == {"CPU": "1"}
    assert actor()["resources"] == {}
    assert task(num_cpus=2, num_gpus=0.5, memory=2**30, resources={"custom_resource": 1})["resources"] == {
        "CPU": "2", "GPU": "0.5", "memory": "1073741824", "custom_resource": "1"}
    assert actor(num_gpus=2)["resources"] == {"GPU": "2"}
    assert task(resources={"memory_x": "16Gi"})["resources"]["memory_x"] == "16Gi"


def test_seed_forms_convert_to_the_head_s_bodies():
    body = actor(
        labels={"location": "dc_1"},
        label_selector={"berth.io/accelerator-type": "nvidia-h100", "zone": In("a", "b"), "x": NotIn("c"),
                        "y": Exists(), "z": DoesNotExist(), "w": "!in(a,b)"},
        tolerations={"gpu_node": Exists(), "gpu_type": In("A100")},
        fallback_strategy=[{"label_selector": {}}],
        max_restarts=-1, name="web", namespace="ml",
        runtime_env={"env_vars": {"EPOCHS": "3"}},
    )
    assert body["labels"] == {"location": "dc_1"}
    assert body["label_selector"] == {"berth.io/accelerator-type": "nvidia-h100", "zone": "in(a,b)",
                                      "x": "!in(c)", "y": "exists()", "z": "!exists()", "w": "!in(a,b)"}
    assert body["tolerations"] == {"gpu_node": "exists()", "gpu_type": "in(A100)"}
    assert body["fallback_strategy"] == [{"label_selector": {}}]
    assert (body["max_restarts"], body["name"], body["namespace"]) == (-1, "web", "ml")
    assert body["env"] == {"EPOCHS": "3"}

    strategy = ActorAffinitySchedulingStrategy([
        ActorAffinityMatchExpression("location", ActorAffinityOperator.DOES_NOT_EXIST, [], False),
        ActorAffinityMatchExpression("version", "exists", [], True),
        ActorAffinityMatchExpression("app", ActorAffinityOperator.NOT_IN, ["web"], False,
                                     topology_key="berth.io/availability-zone"),
    ])
    assert actor(scheduling_strategy=strategy)["scheduling_strategy"] == {
        "type": "ACTOR_AFFINITY", "match": "all", "expressions": [
            {"key": "location", "operator": "DOES_NOT_EXIST", "soft": False},
            {"key": "version", "operator": "EXISTS", "soft": True},
            {"key": "app", "operator": "NOT_IN", "values": ["web"], "soft": False,
             "topology_key": "berth.io/availability-zone"},
        ]}
    assert ActorAffinitySchedulingStrategy([strategy.match_expressions[0]], is_or_semantics=True).to_rest()["match"] == "any"
    assert task(scheduling_strategy=NodeLabelSchedulingStrategy(
        hard={"k": NotIn("A100", "T100")}, soft={"z": In("a")}))["scheduling_strategy"] == {
        "type": "NODE_LABEL", "hard": {"k": "!in(A100,T100)"}, "soft": {"z": "in(a)"}}
    assert task(scheduling_strategy=NodeAffinitySchedulingStrategy("cpu-a", soft=True, _spill_on_unavailable=True))[
        "scheduling_strategy"] == {"type": "NODE_AFFINITY", "node_id": "cpu-a", "soft": True,
                                   "spill_on_unavailable": True}
    assert task(scheduling_strategy="spread")["scheduling_strategy"] == "SPREAD"
    assert task(scheduling_strategy=PlacementGroupSchedulingStrategy("pg-3", 1))["scheduling_strategy"] == {
        "type": "PLACEMENT_GROUP", "group": "pg-3", "bundle": 1}


def test_group_bodies():
    body = _options.group_body(
        [{"CPU": 1}] + [{"GPU": 1}] * 2, strategy="strict_spread",
        bundle_label_selector=[{"berth.io/market-type": "spot"}] + [{"berth.io/accelerator-type": "nvidia-h100"}] * 2,
        tolerations={"gpu_node": Exists()},
        fallback_strategy=[{"bundles": [{"GPU": 1}] * 4, "bundle_label_selector": [{"a": "b"}] * 4}])
    assert body == {
        "bundles": [{"CPU": "1"}, {"GPU": "1"}, {"GPU": "1"}], "strategy": "STRICT_SPREAD",
        "bundle_label_selector": [{"berth.io/market-type": "spot"}, {"berth.io/accelerator-type": "nvidia-h100"},
                                  {"berth.io/accelerator-type": "nvidia-h100"}],
        "tolerations": {"gpu_node": "exists()"},
        "fallback_strategy": [{"bundles": [{"GPU": "1"}] * 4, "bundle_label_selector": [{"a": "b"}] * 4}],
    }


def test_lifetimes():
    assert "lifetime" not in actor() and "lifetime" not in _options.group_body([{"CPU": 1}])
    assert actor(lifetime="detached")["lifetime"] == "detached"
    assert actor(lifetime="non_detached")["lifetime"] == "non_detached"
    assert _options.group_body([{"CPU": 1}], lifetime="detached")["lifetime"] == "detached"
    rule = 'is not one of None, "detached", "non_detached"'
    refused("lifetime", f"'bogus' {rule}", actor, lifetime="bogus")
    refused("lifetime", f"'DETACHED' {rule}", _options.group_body, [{"CPU": 1}], lifetime="DETACHED")
    refused("lifetime", "is an option of actors", task, lifetime="detached")


def test_bad_input_is_refused_with_the_head_s_fields_and_rules():
    refused("resources.GPU", "1.5 is not allowed: GPU is shared per instance, so a request must be below 1",
            task, num_gpus=1.5)
    refused("resources.CPU", "-1 is negative", task, num_cpus=-1)
    refused("resources.CPU", "more than 4 decimal places", task, num_cpus=0.12345)
    refused("resources.TPU", "not a decimal number", task, resources={"TPU": "lots"})
    refused("resources.CPU", "give CPU with num_cpus", task, resources={"CPU": 1})
    refused("label_selector.zone", "expression \"in(a,\" is invalid: a '(' is not closed with ')'",
            task, label_selector={"zone": "in(a,"})
    refused("label_selector.zone", "unknown operator \"near\"", task, label_selector={"zone": "near(a)"})
    refused("tolerations.gpu_node", "exists() takes no values", task, tolerations={"gpu_node": "exists(a)"})
    refused("labels.-x", "label key \"-x\" is invalid", actor, labels={"-x": "1"})
    refused("labels." + "k" * 64, "a name is 1 to 63 characters", actor, labels={"k" * 64: "1"})
    refused("labels.app", "value \"no spaces\" is invalid", actor, labels={"app": "no spaces"})
    refused("options", "unknown option 'colour'", task, colour="red")
    refused("labels", "is an option of actors", task, labels={"a": "b"})
    refused("max_retries", "below 0", task, max_retries=-2)
    refused("max_restarts", "below -1", actor, max_restarts=-2)
    refused("runtime_env.pip", "not supported", task, runtime_env={"pip": ["requests"]})
    refused("runtime_env.env_vars.BERTH_X", "set by Berth", task, runtime_env={"env_vars": {"BERTH_X": "1"}})
    refused("scheduling_strategy", "unknown strategy", task, scheduling_strategy="closest")
    refused("label_selector", "not allowed with a placement group strategy", task,
            scheduling_strategy=PlacementGroupSchedulingStrategy("pg-1", 0), label_selector={"a": "b"})
    refused("fallback_strategy[0]", "each alternative", task, fallback_strategy=[{"bundles": []}])
    refused("operator", "unknown operator \"NEAR\"; use IN, NOT_IN, EXISTS or DOES_NOT_EXIST",
            ActorAffinityMatchExpression, "k", "NEAR", ["x"], False)
    refused("scheduling_strategy.expressions[0].values", "IN needs at least one value",
            ActorAffinityMatchExpression, "k", ActorAffinityOperator.IN, [], False)
    refused("scheduling_strategy.expressions[0].values", "EXISTS takes no values",
            ActorAffinityMatchExpression, "k", ActorAffinityOperator.EXISTS, ["x"], False)
    refused("scheduling_strategy.hard.k", "is invalid", NodeLabelSchedulingStrategy, hard={"k": "in()"})
    refused("bundle_label_selector", "2 selectors for 1 bundles", _options.group_body, [{"GPU": 1}],
            bundle_label_selector=[{}, {}])
    refused("bundles[0].GPU", "a bundle asks for a share below 1 or whole instances", _options.group_body,
            [{"GPU": 1.5}])
    refused("bundles", "at least one bundle", _options.group_body, [])
    refused("bundles[0]", "at least one resource", _options.group_body, [{}])
    refused("strategy", "unknown placement group strategy", _options.group_body, [{"CPU": 1}], strategy="FOO")
    with pytest.raises(InvalidRequestError):
        In()


def test_task_errors_are_instances_of_their_cause():
    class Odd(Exception):
        def __init__(self, a, b):
            super().__init__(a, b)
            self.a, self.b = a, b

    for cause in (ValueError("v"), KeyError("k"), Odd(1, 2)):
        error = TaskError("f", repr(cause), "Traceback ...", cause).as_instanceof_cause()
        assert isinstance(error, TaskError) and isinstance(error, type(cause))
        assert error.remote_traceback == "Traceback ..."
        assert "f raised" in str(error)
    assert TaskError("f", "x", "tb", None).as_instanceof_cause().cause is None

    class Final(Exception):
        def __init_subclass__(cls, **kw):
            raise TypeError("final")

    error = TaskError("f", "x", "tb", Final()).as_instanceof_cause()
    assert type(error) is TaskError
