"""The options of ``@berth.remote`` / ``.options()`` (Ray's names), checked and turned into
the head's REST bodies (``POST /api/v1/tasks``, ``/actors``, ``/placement_groups``)."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional

from . import _labels
from .exceptions import InvalidRequestError
from .util import scheduling_strategies

COMMON = {"num_cpus", "num_gpus", "memory", "resources", "label_selector", "fallback_strategy",
          "tolerations", "scheduling_strategy", "name", "namespace", "runtime_env"}
KNOWN_TASK_OPTIONS = COMMON | {"max_retries", "num_returns", "max_calls"}
KNOWN_ACTOR_OPTIONS = COMMON | {"labels", "max_restarts", "lifetime", "max_concurrency"}
GROUP_STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
# The head's limits (crates/berth-head/src/handle.rs).
MAX_TEXT = 253
# Ray's spellings; None is the default, non-detached: the work ends with its owner.
LIFETIMES = (None, "detached", "non_detached")


def validate_options(options: Dict[str, Any], kind: str) -> Dict[str, Any]:
    """Checks ``options`` of a task (``kind="task"``) or an actor; returns them (unchanged
    values). Raises ``InvalidRequestError`` naming the option and the rule."""
    known = KNOWN_TASK_OPTIONS if kind == "task" else KNOWN_ACTOR_OPTIONS
    other = KNOWN_ACTOR_OPTIONS if kind == "task" else KNOWN_TASK_OPTIONS
    for name in options:
        if name not in known:
            if name in other:
                raise InvalidRequestError(name, f"is an option of {'actors' if kind == 'task' else 'tasks'}, not of {kind}s")
            raise InvalidRequestError("options", f"unknown option {name!r}; known: {', '.join(sorted(known))}")
    # Building the body checks every value; the command is a placeholder here.
    (task_body if kind == "task" else actor_body)(options, "python", [], {})
    return options


def _number(field: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequestError(field, f"{value!r} is not a whole number")
    if value < minimum:
        raise InvalidRequestError(field, f"{value} is below {minimum}")
    return value


def _text(field: str, value: Any) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_TEXT or any(c < " " for c in value):
        raise InvalidRequestError(field, f"must be 1 to {MAX_TEXT} characters without control characters")
    return value


def resources_of(options: Mapping[str, Any], kind: str) -> Dict[str, str]:
    """What to reserve, name → the head's amount text. Tasks reserve 1 CPU unless told; actors
    nothing (Ray's actors hold no CPU once running)."""
    out: Dict[str, str] = {}
    given = options.get("resources") or {}
    if not isinstance(given, Mapping):
        raise InvalidRequestError("resources", "must be a dict of resource name to amount")
    shorthands = {"num_cpus": "CPU", "num_gpus": "GPU", "memory": "memory"}
    for option, name in shorthands.items():
        if name in given:
            raise InvalidRequestError(f"resources.{name}", f"give {name} with {option}, not in resources")
    for name, value in given.items():
        _labels.resource_name(f"resources.{name}", name)
        out[name] = _labels.amount(f"resources.{name}", name, value)
    for option, name in shorthands.items():
        value = options.get(option)
        if value is not None:
            out[name] = _labels.amount(f"resources.{name}", name, value)
    if kind == "task" and "CPU" not in out:
        out["CPU"] = "1"
    return out


def _fallback(field: str, value: Any) -> List[Dict[str, Any]]:
    if not isinstance(value, (list, tuple)):
        raise InvalidRequestError(field, "must be a list of {\"label_selector\": {...}}")
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, Mapping) or set(item) - {"label_selector"}:
            raise InvalidRequestError(f"{field}[{i}]", "each alternative is {\"label_selector\": {...}}")
        out.append({"label_selector": _labels.selector(f"{field}[{i}].label_selector",
                                                       item.get("label_selector") or {})})
    return out


# What a runtime_env may say (working_dir and py_modules are packed by the caller: _packages).
RUNTIME_ENV_KEYS = ("env_vars", "working_dir", "py_modules")


def _env(options: Mapping[str, Any], env: Mapping[str, str]) -> Dict[str, str]:
    out: Dict[str, str] = {}
    runtime_env = options.get("runtime_env")
    if runtime_env is not None:
        if not isinstance(runtime_env, Mapping):
            raise InvalidRequestError("runtime_env", "must be a dict such as {\"env_vars\": {...}}")
        for key in runtime_env:
            if key not in RUNTIME_ENV_KEYS:
                raise InvalidRequestError(f"runtime_env.{key}", "is not supported (install what it would on the "
                                          "nodes); runtime_env takes env_vars, working_dir and py_modules")
        env_vars = runtime_env.get("env_vars") or {}
        if not isinstance(env_vars, Mapping):
            raise InvalidRequestError("runtime_env.env_vars", "must be a dict of name to value")
        for key, value in env_vars.items():
            field = f"runtime_env.env_vars.{key}"
            if not isinstance(key, str) or not key or "=" in key or "\0" in key:
                raise InvalidRequestError(field, "a variable name must be non-empty, without '='")
            if key.startswith("BERTH_"):
                raise InvalidRequestError(field, "BERTH_ variables are set by Berth")
            if not isinstance(value, str) or "\0" in value:
                raise InvalidRequestError(field, "must be a string without NUL bytes")
            out[key] = value
    out.update(env)
    return out


def _placement(body: Dict[str, Any], options: Mapping[str, Any]) -> None:
    strategy = scheduling_strategies.to_rest(options.get("scheduling_strategy"))
    if strategy is not None:
        body["scheduling_strategy"] = strategy
    if options.get("label_selector") is not None:
        body["label_selector"] = _labels.selector("label_selector", options["label_selector"])
    if options.get("fallback_strategy") is not None:
        body["fallback_strategy"] = _fallback("fallback_strategy", options["fallback_strategy"])
    if options.get("tolerations") is not None:
        body["tolerations"] = _labels.selector("tolerations", options["tolerations"])
    if isinstance(strategy, dict) and strategy.get("type") == "PLACEMENT_GROUP":
        for key in ("label_selector", "fallback_strategy", "tolerations"):
            if key in body:
                raise InvalidRequestError(key, "is not allowed with a placement group strategy: give it to the group")


def _common(options: Mapping[str, Any], kind: str, command: str, args: List[str], env: Mapping[str, str]) -> Dict[str, Any]:
    body: Dict[str, Any] = {"command": command, "args": list(args), "resources": resources_of(options, kind)}
    merged = _env(options, env)
    if merged:
        body["env"] = merged
    for key in ("name", "namespace"):
        if options.get(key) is not None:
            body[key] = _text(key, options[key])
    _placement(body, options)
    return body


def task_body(options: Mapping[str, Any], command: str, args: List[str], env: Mapping[str, str]) -> Dict[str, Any]:
    """The body of ``POST /api/v1/tasks``."""
    body = _common(options, "task", command, args, env)
    if options.get("max_retries") is not None:
        retries = options["max_retries"]
        if retries == -1:
            raise InvalidRequestError("max_retries", "-1 (retry forever) is not supported; give a number of retries")
        body["max_retries"] = _number("max_retries", retries, 0)
    if options.get("num_returns") is not None and options["num_returns"] not in ("streaming", "dynamic"):
        _number("num_returns", options["num_returns"], 1)
    if options.get("max_calls") is not None:
        _number("max_calls", options["max_calls"], 0)
    return body


def actor_body(options: Mapping[str, Any], command: str, args: List[str], env: Mapping[str, str]) -> Dict[str, Any]:
    """The body of ``POST /api/v1/actors``."""
    body = _common(options, "actor", command, args, env)
    if options.get("labels") is not None:
        body["labels"] = _labels.labels("labels", options["labels"])
    if options.get("max_restarts") is not None:
        body["max_restarts"] = _number("max_restarts", options["max_restarts"], -1)
    lifetime = _lifetime(options.get("lifetime"))
    if lifetime is not None:
        body["lifetime"] = lifetime
    if options.get("max_concurrency") is not None:
        _number("max_concurrency", options["max_concurrency"], 1)
    return body


def group_body(bundles: Any, strategy: str = "PACK", name: Optional[str] = None, namespace: Optional[str] = None,
               bundle_label_selector: Any = None, tolerations: Any = None, fallback_strategy: Any = None,
               lifetime: Optional[str] = None) -> Dict[str, Any]:
    """The body of ``POST /api/v1/placement_groups``."""
    body: Dict[str, Any] = {"bundles": _bundles("bundles", bundles)}
    if not isinstance(strategy, str) or strategy.upper() not in GROUP_STRATEGIES:
        raise InvalidRequestError("strategy", f"unknown placement group strategy {strategy!r}; use PACK, SPREAD, "
                                              "STRICT_PACK or STRICT_SPREAD")
    body["strategy"] = strategy.upper()
    if name:
        body["name"] = _text("name", name)
    if namespace:
        body["namespace"] = _text("namespace", namespace)
    if bundle_label_selector is not None:
        body["bundle_label_selector"] = _selectors("bundle_label_selector", bundle_label_selector, len(bundles))
    if tolerations is not None:
        body["tolerations"] = _labels.selector("tolerations", tolerations)
    if fallback_strategy is not None:
        if not isinstance(fallback_strategy, (list, tuple)):
            raise InvalidRequestError("fallback_strategy", "must be a list of {\"bundles\": [...], \"bundle_label_selector\": [...]}")
        alternatives = []
        for i, alt in enumerate(fallback_strategy):
            field = f"fallback_strategy[{i}]"
            if not isinstance(alt, Mapping) or set(alt) - {"bundles", "bundle_label_selector"}:
                raise InvalidRequestError(field, "each alternative is {\"bundles\": [...], \"bundle_label_selector\": [...]}")
            out: Dict[str, Any] = {}
            if "bundles" in alt:
                out["bundles"] = _bundles(f"{field}.bundles", alt["bundles"])
            count = len(alt.get("bundles") or bundles)
            if alt.get("bundle_label_selector") is not None:
                out["bundle_label_selector"] = _selectors(f"{field}.bundle_label_selector",
                                                          alt["bundle_label_selector"], count)
            alternatives.append(out)
        body["fallback_strategy"] = alternatives
    lifetime = _lifetime(lifetime)
    if lifetime is not None:
        body["lifetime"] = lifetime
    return body


def _lifetime(value: Any) -> Optional[str]:
    if value not in LIFETIMES:
        raise InvalidRequestError("lifetime", f"{value!r} is not one of None, \"detached\", \"non_detached\"")
    return value


def _bundles(field: str, bundles: Any) -> List[Dict[str, str]]:
    if not isinstance(bundles, (list, tuple)) or not bundles:
        raise InvalidRequestError(field, "a placement group needs at least one bundle")
    out = []
    for i, bundle in enumerate(bundles):
        if not isinstance(bundle, Mapping) or not bundle:
            raise InvalidRequestError(f"{field}[{i}]", "a bundle must ask for at least one resource")
        out.append({
            _labels.resource_name(f"{field}[{i}].{k}", k): _labels.amount(f"{field}[{i}].{k}", k, v, bundle=True)
            for k, v in bundle.items()
        })
    return out


def _selectors(field: str, selectors: Any, count: int) -> List[Dict[str, str]]:
    if not isinstance(selectors, (list, tuple)):
        raise InvalidRequestError(field, "must be a list with one selector per bundle")
    if len(selectors) != count:
        raise InvalidRequestError(field, f"{len(selectors)} selectors for {count} bundles; give one per bundle or none")
    return [_labels.selector(f"{field}[{i}]", s or {}) for i, s in enumerate(selectors)]
