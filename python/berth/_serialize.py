"""How Python values travel: cloudpickle, with user modules shipped by value.

cloudpickle pickles a function or class of an importable module *by reference* (module name
and attribute), so a worker on another machine would need the user's source on its path.
Modules that are not installed packages (a script's own modules, test files) are registered
to travel *by value* instead, so only installed packages (and the same Python) are needed on
the nodes.
"""

from __future__ import annotations

import pickle
import sys
from typing import Any, Dict, List, Optional, Union

import cloudpickle

CODEC = "python-cloudpickle"

# ``bytes`` and ``bytearray`` values at least this long travel beside the pickle (as numpy
# arrays do), so that neither side copies them: smaller ones cost less inside it.
OUT_OF_BAND_MIN = 64 * 1024

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
    """Pickles ``value`` (protocol 5) into one ``bytes``: for what this SDK sends itself (a
    function, an error); user values go through :func:`pack`."""
    return cloudpickle.dumps(value, protocol=5)


class Packed:
    """A value as it travels: the pickle stream, then the buffers that travel beside it (numpy
    arrays, large ``bytes``), each sent from and received into memory of its own, so that a
    value is never copied whole on the way. ``writable``: the indexes (1 and up) of buffers
    the receiver must be able to change (a writable array stays writable); the others arrive
    as ``bytes``. ``by_id``: how many of the last buffers the stream names by index (large
    ``bytes`` and ``bytearray``s) rather than takes in order (pickle's own out-of-band
    buffers). ``holds``: the objects whose refs were pickled into it, kept alive as long as
    this is (a call's arguments keep what they name until the call ends)."""

    __slots__ = ("parts", "writable", "by_id", "holds")

    def __init__(self, parts: List[Any], writable: "List[int] | None" = None, by_id: int = 0,
                 holds: "List[Any] | None" = None) -> None:
        self.parts = parts
        self.writable = writable or []
        self.by_id = by_id
        self.holds = holds or []

    @property
    def size(self) -> int:
        """Bytes in all."""
        return sum(memoryview(p).nbytes for p in self.parts)


def size_of(payload: "Union[bytes, Packed]") -> int:
    """Bytes a payload takes."""
    return payload.size if isinstance(payload, Packed) else len(payload)


def _large_buffers(value: Any, depth: int = 4, budget: "List[int] | None" = None) -> bool:
    """Whether ``value`` seems to hold a ``bytes`` or ``bytearray`` worth sending beside the
    pickle: a look at most 256 objects deep into containers and objects' attributes. Only
    then is the slower pickler used that sees each of them (pickle's own never lets a
    ``bytes`` out of its stream)."""
    budget = budget if budget is not None else [256]
    budget[0] -= 1
    kind = type(value)
    if kind is bytes or kind is bytearray:
        return len(value) >= OUT_OF_BAND_MIN
    if depth == 0 or budget[0] <= 0 or kind in (int, float, str, bool) or value is None:
        return False
    if kind is dict:
        items = value.values()
    elif kind in (list, tuple, set, frozenset):
        items = value
    else:
        items = getattr(value, "__dict__", None)
        items = items.values() if isinstance(items, dict) else ()
    for item in items:
        if budget[0] <= 0:
            return False
        if _large_buffers(item, depth - 1, budget):
            return True
    return False


class _BufferPickler(cloudpickle.Pickler):
    """Sends each large ``bytes`` and ``bytearray`` beside the stream, named by its index."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.named: List[Any] = []

    def persistent_id(self, obj: Any) -> Any:
        kind = type(obj)
        if (kind is bytes or kind is bytearray) and len(obj) >= OUT_OF_BAND_MIN:
            self.named.append(obj)
            return len(self.named) - 1
        return None


class _BufferUnpickler(pickle.Unpickler):
    def __init__(self, stream: Any, buffers: List[Any], named: List[Any]) -> None:
        super().__init__(stream, buffers=buffers)
        self.named = named

    def persistent_load(self, pid: Any) -> Any:
        if type(pid) is not int or not 0 <= pid < len(self.named):
            raise pickle.UnpicklingError(f"no buffer {pid!r} beside this value")
        return self.named[pid]


def _as(kind: type, buffer: Any) -> Any:
    # A part that arrived as the kind it was sent as is the value itself: no copy.
    return buffer if type(buffer) is kind else kind(buffer)


def pack(value: Any, snapshot: bool = False) -> Packed:
    """Pickles ``value`` with its large buffers out of band, referenced rather than copied.
    ``snapshot``: copy each buffer that could still change (a writable array, a ``bytearray``)
    so that the value sent later is the value now (a call's arguments, a ``put``); ``bytes``
    never change and are never copied."""
    import io

    stream = io.BytesIO()
    buffers: List[pickle.PickleBuffer] = []
    kind = _BufferPickler if _large_buffers(value) else cloudpickle.Pickler
    pickler = kind(stream, protocol=5, buffer_callback=buffers.append)
    objects = sys.modules.get("berth._objects")  # loaded by anything that made or got a ref
    if objects is None:
        pickler.dump(value)
        holds: List[Any] = []
    else:
        with objects.collecting() as holds:
            pickler.dump(value)
    parts: List[Any] = [stream.getbuffer()]
    writable = []
    for buffer in buffers:
        raw = buffer.raw()
        if not raw.readonly:
            writable.append(len(parts))
            if snapshot:
                raw = bytes(raw)
        parts.append(raw)
    named = getattr(pickler, "named", [])
    for obj in named:
        if type(obj) is bytearray:
            writable.append(len(parts))
            if snapshot:
                obj = bytes(obj)
        parts.append(obj)
    return Packed(parts, writable, len(named), holds)


def loads(data: "Union[bytes, Packed]") -> Any:
    """Unpickles what :func:`dumps` or :func:`pack` made."""
    if isinstance(data, Packed):
        import io

        split = len(data.parts) - data.by_id
        if not data.by_id:
            return pickle.loads(data.parts[0], buffers=data.parts[1:])
        named = [_as(bytearray if i in data.writable else bytes, p)
                 for i, p in enumerate(data.parts[split:], start=split)]
        return _BufferUnpickler(io.BytesIO(data.parts[0]), data.parts[1:split], named).load()
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
