"""How Python values travel: cloudpickle, with user modules shipped by value.

cloudpickle pickles a function or class of an importable module *by reference* (module name
and attribute), so a worker on another machine would need the user's source on its path.
Modules that are not installed packages (a script's own modules, test files) are registered
to travel *by value* instead, so only installed packages (and the same Python) are needed on
the nodes.
"""

from __future__ import annotations

import sys
from typing import Any, Dict, Optional

import cloudpickle

CODEC = "python-cloudpickle"

_by_value: set = set()


def _installed() -> tuple:
    import sysconfig

    paths = sysconfig.get_paths()
    return tuple(p for p in {paths.get(k) for k in ("purelib", "platlib", "stdlib", "platstdlib")} if p)


def ship_by_value(obj: Any) -> None:
    """Registers the module defining ``obj`` to be pickled by value, unless it is installed
    (or part of Python, or berth itself)."""
    name = getattr(obj, "__module__", None)
    if not name or name == "__main__" or name in _by_value:
        return
    module = sys.modules.get(name)
    path = getattr(module, "__file__", None)
    if module is None or path is None or name.split(".")[0] == "berth":
        return
    if any(path.startswith(p) for p in _installed()) or "site-packages" in path:
        return
    try:
        cloudpickle.register_pickle_by_value(module)
    except (ValueError, TypeError):
        return
    _by_value.add(name)


def dumps(value: Any) -> bytes:
    """Pickles ``value`` (protocol 5)."""
    return cloudpickle.dumps(value, protocol=5)


def loads(data: bytes) -> Any:
    """Unpickles what :func:`dumps` made."""
    return cloudpickle.loads(data)


def error_payload(exc: BaseException, function_name: str) -> bytes:
    """An exception as it travels: its text and traceback always, the object when it pickles."""
    import traceback

    info: Dict[str, Any] = {
        "function": function_name,
        "type": f"{type(exc).__module__}.{type(exc).__qualname__}",
        "repr": repr(exc),
        "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
        "exception": None,
    }
    try:
        info["exception"] = dumps(exc)
    except Exception:  # noqa: BLE001 - any pickling failure leaves the text only
        pass
    return dumps(info)


def error_from(payload: bytes):
    """The ``TaskError`` a failed call's payload describes (an instance of the original
    exception's class too, when it could be rebuilt)."""
    from .exceptions import TaskError

    info = loads(payload)
    cause: Optional[BaseException] = None
    if info.get("exception") is not None:
        try:
            cause = loads(info["exception"])
        except Exception:  # noqa: BLE001 - the class may not exist here
            cause = None
    error = TaskError(info.get("function", "?"), info.get("repr", "?"), info.get("traceback", ""), cause)
    return error.as_instanceof_cause()
