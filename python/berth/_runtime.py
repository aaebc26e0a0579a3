"""The driver's connection to a cluster: the REST client, the owner service, the threads that
submit work and watch it, and what ``berth.shutdown()`` cleans up."""

from __future__ import annotations

import atexit
import json
import logging
import os
import queue
import shlex
import socket
import sys
import threading
import time
import unicodedata
import uuid
from typing import Dict, Optional, Tuple

from . import _protocol
from ._client import Client, discover
from ._owner import Call, OwnerServer
from .exceptions import (
    BerthError,
    ConflictError,
    InvalidRequestError,
    NotFoundError,
    NotInitializedError,
    TaskCancelledError,
    WorkerCrashedError,
)

log = logging.getLogger("berth")

_lock = threading.RLock()
_current: Optional["Runtime"] = None

# The driver asks the head about its unfinished tasks at most this long per call: a task whose
# worker died for good is noticed within that time.
WATCH_S = 2.0

# The head's rules for a job: its lease (seconds), its name (characters), a metadata value (bytes).
MIN_LEASE_S, MAX_LEASE_S = 1, 86400
MAX_NAME = 253
MAX_METADATA_VALUE = 4096


class Runtime:
    """One driver's session with one head."""

    def __init__(self, client: Client, namespace: str, job_lease_s: Optional[float] = None,
                 bind: Optional[str] = None) -> None:
        self.client = client
        self.namespace = namespace
        # The owner service listens first: an address it cannot bind fails init() before a job
        # is made.
        host, advertise = _protocol.listen_address(client.url, bind)
        try:
            self.owner = OwnerServer(host, advertise)
        except OSError as e:
            raise InvalidRequestError("bind", f"cannot listen on {host!r}: {e.strerror or e} (give an "
                                      "address of this machine, or 0.0.0.0 for every interface)") from None
        # A process an agent started (a worker, or a command run as work) creates no job: what
        # it creates belongs to its work's job and is owned by its own actor or task, so it
        # ends when this process does. Any other process is a driver and holds a job.
        self.owner_id = os.environ.get("BERTH_ACTOR_ID") or os.environ.get("BERTH_TASK_ID") or None
        self.job: Optional[JobLease] = None
        if self.owner_id is not None:
            self.job_id = os.environ.get("BERTH_JOB_ID") or None
        else:
            try:
                self.job = JobLease.create(client, namespace, job_lease_s)
            except BaseException:
                self.owner.close()
                raise
            self.job_id = self.job.id
        # runtime_env directories packed this session: (field, path) to content hash.
        self.packed: Dict[Tuple[str, str], str] = {}
        # Who this driver is, for its workers' environment: a worker process is reused only
        # for the same driver's work (a later driver on the same port is another).
        self.driver_id = uuid.uuid4().hex
        # The worker runs the driver's Python unless told otherwise (another path on the nodes).
        self.python = os.environ.get("BERTH_WORKER_PYTHON") or sys.executable
        # Workers are forked from a warm copy on each node (the agent's fork servers) unless
        # BERTH_WORKER_FORK=0 asks for a new interpreter per attempt.
        self.fork_server = os.environ.get("BERTH_WORKER_FORK", "1") != "0"
        # Submissions that must wait (for their arguments' results, an actor's creation) run
        # on these threads; tasks ready to go are posted by the batcher.
        self.submitter = Submitter(32)
        self.tasks = TaskBatcher(client, self.owner, self.watch)
        self._watched: Dict[str, Call] = {}
        self._watch = threading.Condition()
        self._closed = False
        threading.Thread(target=self._monitor, daemon=True, name="berth-monitor").start()

    def ownership(self) -> Dict[str, str]:
        """What every creation of this process names: its job and, in a worker, its owner."""
        out = {}
        if self.job_id is not None:
            out["job_id"] = self.job_id
        if self.owner_id is not None:
            out["owner_id"] = self.owner_id
        return out

    # -- tasks --------------------------------------------------------------------------------

    def watch(self, call: Call) -> None:
        """Watches a submitted task at the head until its result arrives."""
        with self._watch:
            self._watched[call.work_id] = call
            self._watch.notify_all()

    def _monitor(self) -> None:
        while not self._closed:
            with self._watch:
                for work_id in [w for w, c in self._watched.items() if all(s.done for s in c.states)]:
                    del self._watched[work_id]
                while not self._watched and not self._closed:
                    self._watch.wait()
                ids = list(self._watched)[:10_000]
            if self._closed:
                return
            try:
                _, answer = self.client.request(
                    "POST", "/api/v1/tasks:wait", {"task_ids": ids, "timeout_s": WATCH_S}, timeout=WATCH_S + 30
                )
            except BerthError as e:
                log.warning("berth: cannot watch tasks at the head: %s", e)
                time.sleep(1.0)
                continue
            for task in answer.get("ended", []):
                self._ended(task["task_id"], task)
            for work_id in answer.get("unknown", []):
                self._ended(work_id, None)

    def _ended(self, work_id: str, task: Optional[dict]) -> None:
        with self._watch:
            call = self._watched.pop(work_id, None)
        if call is None or all(s.done for s in call.states):
            return
        if task is None:
            error: BaseException = WorkerCrashedError(
                f"{work_id} ({call.name}) is no longer known to the head (forgotten after it ended)"
            )
        elif task["state"] == "CANCELLED":
            # Why, when the head says: by a user, or with its owner (its job ended).
            reason = next((h.get("message") for h in reversed(task.get("history") or [])
                           if h.get("kind") == "cancelled" and h.get("message")), None)
            error = TaskCancelledError(f"{work_id} ({call.name}) was cancelled" + (f": {reason}" if reason else ""))
        elif task["state"] == "FAILED":
            error = WorkerCrashedError(f"{work_id} ({call.name}) failed: {task.get('failure', 'no reason given')}")
        else:
            error = WorkerCrashedError(
                f"{work_id} ({call.name}) finished without handing back a result (its process "
                f"exited with code {task.get('exit_code')} before returning)"
            )
        for state in call.states:
            state.set_error(error)
        self.owner.forget(call)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with self._watch:
            self._watch.notify_all()
        # Tasks whose results arrived but whose ends the head may not have heard yet are
        # FINISHED, not cancelled with this process or its job.
        delivered = self.owner.recently_delivered()
        if delivered:
            try:
                self.client.request("POST", "/api/v1/tasks:delivered", {"task_ids": delivered}, timeout=10)
            except BerthError as e:
                log.warning("berth: cannot tell the head which tasks' results arrived: %s", e)
        # The head ends what the job owned (not what is detached), before the owner service
        # its workers fetch from goes away.
        if self.job is not None:
            self.job.finish()
        from . import _remote

        _remote.close_connections()
        self.submitter.close()
        self.tasks.close()
        self.owner.close()


class JobLease:
    """The driver's job, held by renewing its lease every sixth of it from a daemon thread. A
    job the head ended (stopped by a user, or lost: no renewal for a whole lease) is said once,
    at ERROR, and no longer renewed."""

    def __init__(self, client: Client, record: dict) -> None:
        self.client = client
        self.id: str = record["job_id"]
        self.lease_s = int(record["lease_ms"]) / 1000
        self._stopped = threading.Event()
        self._pid = os.getpid()
        threading.Thread(target=self._renew, daemon=True, name="berth-job").start()

    @classmethod
    def create(cls, client: Client, namespace: str, lease_s: Optional[float]) -> "JobLease":
        body: dict = {"name": _program_name(), "namespace": namespace, "metadata": {
            "sdk": "python",
            "host": _visible(socket.gethostname(), MAX_METADATA_VALUE),
            "pid": str(os.getpid()),
            "entrypoint": _visible(shlex.join(getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv]),
                                   MAX_METADATA_VALUE),
        }}
        if lease_s is not None:
            body["lease_s"] = lease_s
        return cls(client, client.create("/api/v1/jobs", body))

    def _renew(self) -> None:
        period = self.lease_s / 6
        failing = False
        while not self._stopped.wait(period):
            try:
                self.client.request("POST", f"/api/v1/jobs/{self.id}/renew", timeout=max(2.0, period))
            except (ConflictError, NotFoundError) as e:
                if not self._stopped.is_set():
                    log.error("berth: the head ended this driver's job %s (%s); the actors, tasks and placement "
                              "groups it owned were ended with it, and new ones are refused", self.id, e)
                return
            except BerthError as e:
                log.warning("berth: could not renew the lease of job %s (%.0f s; retrying every %.1f s): %s",
                            self.id, self.lease_s, period, e)
                failing = True
                continue
            if failing:
                log.warning("berth: the lease of job %s is renewed again", self.id)
                failing = False

    def finish(self) -> None:
        """Ends the job as its driver (FINISHED); the head answers an ended job as it is."""
        self._stopped.set()
        if os.getpid() != self._pid:
            return  # a forked child exiting: the job is its parent's
        try:
            self.client.request("POST", f"/api/v1/jobs/{self.id}/finish", timeout=10)
        except BerthError as e:
            log.warning("berth: could not finish job %s (%s); the head ends it once its lease of %.0f s runs out",
                        self.id, e, self.lease_s)


def _program_name() -> str:
    """The job's name: the program's file name (a module run with ``-m``: its package's), or
    ``python`` interactively and for ``-c``."""
    program = sys.argv[0] if sys.argv else ""
    if program in ("", "-c", "-"):
        return "python"
    path = os.path.abspath(program)
    name = os.path.basename(os.path.dirname(path)) if os.path.basename(path) == "__main__.py" else os.path.basename(path)
    return _visible(name, MAX_NAME, chars=True) or "python"


def _visible(text: str, limit: int, chars: bool = False) -> str:
    """``text`` as the head takes it in a name or a metadata value: control and format
    characters (a newline in a ``-c`` program, undecodable bytes of a file name) escaped, cut
    to ``limit`` characters (``chars``) or UTF-8 bytes."""
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    text = "".join(c.encode("unicode_escape").decode("ascii") if unicodedata.category(c) in ("Cc", "Cf") else c
                   for c in text)
    if chars:
        return text[:limit]
    return text.encode("utf-8")[:limit].decode("utf-8", "ignore")


class Submitter:
    """Runs submissions in the background on daemon threads: a submission waiting for an
    argument that never resolves must not keep the interpreter from exiting (as a
    ``ThreadPoolExecutor``'s threads would)."""

    def __init__(self, threads: int) -> None:
        self._jobs: "queue.Queue" = queue.Queue()
        self._threads = threads
        for i in range(threads):
            threading.Thread(target=self._run, daemon=True, name=f"berth-submit-{i}").start()

    def submit(self, fn, *args) -> None:
        self._jobs.put((fn, args))

    def close(self) -> None:
        for _ in range(self._threads):
            self._jobs.put(None)

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fn, args = job
            try:
                fn(*args)
            except Exception:  # noqa: BLE001 - each job reports its own errors
                log.exception("berth: a background submission failed")


class TaskBatcher:
    """Posts the driver's ready tasks to ``POST /api/v1/tasks:batch``: whatever has queued up
    while the last batch was in flight goes as the next one (up to ``MAX_ITEMS``). A lone task
    goes at once, alone; a burst costs one request and one durable commit per batch instead of
    one per task. Two threads, so that one batch is being built while another is answered."""

    MAX_ITEMS = 1000
    # Half the head's 16 MiB limit for a batch's body: a batch of large bodies (big
    # `runtime_env`s) is cut in several rather than refused whole.
    MAX_BYTES = 8 << 20
    THREADS = 2

    def __init__(self, client: Client, owner: OwnerServer, watch) -> None:
        self._client, self._owner, self._watch_task = client, owner, watch
        self._ready: "queue.Queue" = queue.Queue()
        for i in range(self.THREADS):
            threading.Thread(target=self._run, daemon=True, name=f"berth-tasks-{i}").start()

    def submit(self, call: Call, body: dict) -> None:
        """Queues a task whose payload is ready (``call.payload`` set)."""
        self._ready.put((call, body, len(json.dumps(body))))

    def close(self) -> None:
        for _ in range(self.THREADS):
            self._ready.put(None)

    def _run(self) -> None:
        while True:
            first = self._ready.get()
            if first is None:
                return
            batch, size = [first[:2]], first[2]
            while len(batch) < self.MAX_ITEMS:
                try:
                    item = self._ready.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    self._ready.put(None)  # for this thread's next turn
                    break
                if size + item[2] > self.MAX_BYTES:
                    self._ready.put(item)  # the next batch's (the order among ready tasks is free)
                    break
                batch.append(item[:2])
                size += item[2]
            try:
                self._post(batch)
            except Exception:  # noqa: BLE001 - each task has been told already
                log.exception("berth: a batch of tasks failed")

    def _post(self, batch) -> None:
        for call, _ in batch:
            self._owner.add(call)
        try:
            answer = self._client.create("/api/v1/tasks:batch", {"items": [body for _, body in batch]})
            items = answer["items"]
            if len(items) != len(batch):
                raise BerthError(f"the head answered {len(items)} items for a batch of {len(batch)}")
        except BaseException as e:  # noqa: BLE001 - every task of the batch sees it in get()
            for call, _ in batch:
                _fail(self._owner, call, e)
            return
        for (call, _), item in zip(batch, items):
            task = item.get("created")
            if item.get("status") == 201 and isinstance(task, dict):
                self._owner.bind(call, task["task_id"], task["work_key"])
                self._watch_task(call)
            else:
                _fail(self._owner, call, item_error(item))


def item_error(item: dict) -> BaseException:
    """The exception a batch item's error stands for: what the single endpoint would raise."""
    from ._client import _error

    return _error(int(item.get("status") or 500), item.get("error"), "POST", "/api/v1/tasks")


def _fail(owner: OwnerServer, call: Call, error: BaseException) -> None:
    owner.forget(call)
    for state in call.states:
        state.set_error(error)


def init(address: Optional[str] = None, token: Optional[str] = None, *, namespace: Optional[str] = None,
         ca: Optional[str] = None, ignore_reinit_error: bool = False, job_lease_s: Optional[float] = None,
         bind: Optional[str] = None) -> dict:
    """Connects this process (the driver) to a Berth head and starts its job.

    ``address``: ``HOST:PORT`` or a URL; default ``$BERTH_ADDRESS``, else the head this machine
    runs (the data directory's ``head-address``). ``token``: default, inside a worker, its work's
    credential (it reaches the work of the worker's job only); else ``$BERTH_TOKEN``, else the
    data directory's ``token``. ``namespace``: of the actors this driver creates and looks up
    (default ``default``). ``ca``: the CA file of a head serving TLS (default ``$BERTH_CA``).
    ``job_lease_s``: how long the head keeps the job (and what it owns) without hearing from
    this driver, 1 to 86400 s (default: the head's, 30 s). ``bind``: the address this process's
    owner service (and, in a worker, its actor's server) listens on: default ``$BERTH_BIND``,
    else inside a worker the address its node registered with, else the local address that
    routes to the head (loopback on ``berth up``); ``0.0.0.0`` for every interface. Inside a
    worker no job is made:
    what it creates belongs to its work's job and ends when its process does.
    Raises ``ConnectionError`` (``HeadUnreachableError``) when no head answers.
    """
    global _current
    with _lock:
        if _current is not None:
            if ignore_reinit_error:
                return _context(_current)
            raise RuntimeError("berth.init() was called already; call berth.shutdown() first")
        if namespace is not None and (not isinstance(namespace, str) or not namespace or len(namespace) > 253):
            raise InvalidRequestError("namespace", "must be 1 to 253 characters")
        if job_lease_s is not None and (isinstance(job_lease_s, bool) or not isinstance(job_lease_s, (int, float))
                                        or not MIN_LEASE_S <= job_lease_s <= MAX_LEASE_S):
            raise InvalidRequestError("job_lease_s", f"{job_lease_s!r} is not from {MIN_LEASE_S} to {MAX_LEASE_S} seconds")
        if bind is not None and (not isinstance(bind, str) or not bind.strip()):
            raise InvalidRequestError("bind", f"{bind!r} is not an address: give an IP of this machine, or 0.0.0.0")
        url, token, ca = discover(address, token, ca)
        client = Client(url, token, ca)
        # Inside a worker, whose work credential reaches its own job only: its own work.
        me = os.environ.get("BERTH_ACTOR_ID") and f"/api/v1/actors/{os.environ['BERTH_ACTOR_ID']}"
        me = me or (os.environ.get("BERTH_TASK_ID") and f"/api/v1/tasks/{os.environ['BERTH_TASK_ID']}")
        client.request("GET", me or "/api/v1/cluster/status", timeout=10)
        _current = Runtime(client, namespace or "default", job_lease_s, bind)
        return _context(_current)


def _context(runtime: Runtime) -> dict:
    return {"address": runtime.client.url, "namespace": runtime.namespace, "owner": runtime.owner.address,
            "job_id": runtime.job_id}


def shutdown() -> None:
    """Disconnects: finishes this driver's job, so the head ends the actors, tasks and placement
    groups it owned (not the detached ones), and stops its threads. Also run at exit. Inside a
    worker, what it created ends when its process does."""
    global _current
    with _lock:
        runtime, _current = _current, None
    if runtime is not None:
        runtime.close()


def is_initialized() -> bool:
    """True between ``init()`` and ``shutdown()``."""
    return _current is not None


def current() -> Runtime:
    """The session, connecting with the defaults on first use (as Ray does)."""
    runtime = _current
    if runtime is not None:
        return runtime
    init(ignore_reinit_error=True)
    runtime = _current
    if runtime is None:
        raise NotInitializedError("berth.init() did not connect")
    return runtime


atexit.register(shutdown)
