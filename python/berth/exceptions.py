"""What the SDK raises. ``berth.exceptions`` is reachable after a plain ``import berth``."""

from __future__ import annotations

from typing import Optional


class BerthError(Exception):
    """Base of every Berth error."""


class InvalidRequestError(BerthError, ValueError):
    """Bad input, refused before anything was sent: ``field`` is the head's name for it and
    ``rule`` the rule it breaks."""

    def __init__(self, field: str, rule: str) -> None:
        self.field, self.rule = field, rule
        super().__init__(f"{field}: {rule}" if field else rule)


class RequestError(BerthError):
    """The head refused a call: HTTP ``status``, the head's error ``kind``, ``field`` when it
    names one, and its ``message``."""

    def __init__(self, status: int, kind: str, message: str, field: Optional[str] = None) -> None:
        self.status, self.kind, self.message, self.field = status, kind, message, field
        super().__init__(f"{field}: {message}" if field else message)


class NotFoundError(RequestError, LookupError):
    """The head does not know that ID (404)."""


class ConflictError(RequestError):
    """The call conflicts with the cluster's state, e.g. a name in use (409)."""


class HeadUnreachableError(BerthError, ConnectionError):
    """No head answered at the address (or it closed the connection, or timed out)."""


class NotInitializedError(BerthError, RuntimeError):
    """The driver is not connected to a head."""


class GetTimeoutError(BerthError, TimeoutError):
    """``berth.get`` waited as long as its ``timeout``."""


class TaskError(BerthError):
    """A task or actor method raised: ``cause`` is the exception (when it could be rebuilt
    here) and ``remote_traceback`` its traceback on the node. ``berth.get`` raises it as an
    instance of the cause's class too, so ``except ValueError`` catches a remote ValueError."""

    def __init__(self, function_name: str, cause_repr: str, remote_traceback: str,
                 cause: Optional[BaseException] = None) -> None:
        self.function_name = function_name
        self.cause_repr = cause_repr
        self.remote_traceback = remote_traceback
        self.cause = cause
        super().__init__(self._text())

    def _text(self) -> str:
        return f"{self.function_name} raised {self.cause_repr}\n\nRemote traceback:\n{self.remote_traceback}"

    def __str__(self) -> str:
        return self._text()

    def as_instanceof_cause(self) -> "TaskError":
        """This error as an instance of both ``TaskError`` and the cause's class, when that
        class can be subclassed; else itself."""
        cause = self.cause
        if cause is None or isinstance(cause, TaskError):
            return self
        base = type(cause)
        try:
            mixed = type(f"TaskError({base.__name__})", (TaskError, base), {
                "__init__": lambda self, *a, **k: None,
                "__str__": TaskError.__str__,
                "__module__": __name__,
            })
            # Built without the cause's __init__ (its signature is unknown): copy its state.
            error = mixed.__new__(mixed)
            try:
                error.__dict__.update(getattr(cause, "__dict__", {}))
            except (AttributeError, TypeError):
                pass
            error.args = cause.args
            error.function_name = self.function_name
            error.cause_repr = self.cause_repr
            error.remote_traceback = self.remote_traceback
            error.cause = cause
            return error
        except Exception:  # noqa: BLE001 - a class that cannot be mixed in: plain TaskError
            return self


class WorkerCrashedError(BerthError):
    """A task's worker died and no retries are left (or it exited without a result)."""


class TaskCancelledError(BerthError):
    """The task was cancelled."""


class ActorDiedError(BerthError):
    """The actor is dead: ``reason`` says why; ``cause`` is its constructor's exception when
    that is why."""

    def __init__(self, actor_id: str, reason: str, cause: Optional[BaseException] = None) -> None:
        self.actor_id, self.reason, self.cause = actor_id, reason, cause
        super().__init__(f"actor {actor_id} is dead: {reason}")


class ActorUnavailableError(BerthError):
    """The actor's process stopped before answering this call (it may be restarting)."""


class ObjectLostError(BerthError):
    """A value another process held (a ref received inside an argument) cannot be fetched:
    that process is gone."""


class PlacementGroupError(BerthError):
    """The placement group was removed (or cannot be used)."""


__all__ = [
    "ActorDiedError", "ActorUnavailableError", "BerthError", "BerthHintWarning", "BerthInfeasibleWarning",
    "ConflictError", "GetTimeoutError", "HeadUnreachableError", "InvalidRequestError", "NotFoundError",
    "NotInitializedError", "PlacementGroupError", "RequestError", "TaskCancelledError", "TaskError",
    "WorkerCrashedError",
]


class BerthHintWarning(UserWarning):
    """A creation was accepted but waits, naming something no node has that looks like a name
    the cluster does have: ``market-type`` where the nodes have ``berth.io/market-type``,
    ``cpu`` where they have ``CPU``. Turn it into an error with
    ``warnings.simplefilter("error", BerthHintWarning)``."""


class BerthInfeasibleWarning(UserWarning):
    """What a ``get``, ``wait`` or placement group's ``ready``/``wait`` has waited on for 5 s
    cannot be placed on any node the cluster has (the head's diagnosis says it is infeasible):
    the message is the head's summary. The call keeps waiting (a node that can take it may
    join); its ``timeout`` still applies."""
