"""The head's REST API over HTTP/1.1 with kept-alive connections (one per thread).

Finds the head and its token the way the CLI does: ``$BERTH_ADDRESS``, ``$BERTH_TOKEN``,
``$BERTH_CA``, else the files a local head wrote in the data directory (``$BERTH_DATA_DIR`` or
``~/.berth``).
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import ssl
import threading
import time
import uuid
import warnings
from pathlib import Path
from typing import Any, Dict, Optional, Tuple
from urllib.parse import quote, urlencode

from .exceptions import (
    BerthHintWarning,
    ConflictError,
    HeadUnreachableError,
    InvalidRequestError,
    NotFoundError,
    RequestError,
)

DEFAULT_PORT = 8780
# Long polls ask the head for at most this long, and the socket waits a little longer.
MAX_POLL_S = 30.0
# A creation cut off before its answer is sent again, with the same idempotency key, up to this
# many times in all (waits of 0.2, 0.4, 0.8, 1.6 and 2 s: about 5 s).
CREATE_ATTEMPTS = 6


def data_dir() -> Path:
    """``$BERTH_DATA_DIR``, else ``~/.berth`` (as the CLI)."""
    env = os.environ.get("BERTH_DATA_DIR")
    if env:
        return Path(env)
    home = os.environ.get("HOME")
    return Path(home) / ".berth" if home else Path(".berth")


def discover(address: Optional[str], token: Optional[str], ca: Optional[str]) -> Tuple[str, Optional[str], Optional[str]]:
    """The head's URL, token and CA file, from the arguments, the environment or the data
    directory; raises ``HeadUnreachableError`` naming what it looked for."""
    directory = data_dir()
    looked = []
    if not address:
        address = os.environ.get("BERTH_ADDRESS")
        looked.append("$BERTH_ADDRESS")
    if not address:
        path = directory / "head-address"
        looked.append(str(path))
        try:
            address = path.read_text().strip()
        except OSError:
            address = None
    if not address:
        raise HeadUnreachableError(
            "no Berth head to connect to: give berth.init(address=...), or set $BERTH_ADDRESS, "
            f"or start one (`berth up`); looked at {', '.join(looked)}"
        )
    if not token:
        token = work_credential()
    if not token:
        token = os.environ.get("BERTH_TOKEN") or None
    if not token:
        try:
            token = (directory / "token").read_text().strip() or None
        except OSError:
            token = None
    if not ca:
        ca = os.environ.get("BERTH_CA") or None
    return active_head(address, ca), token, ca


def work_credential() -> Optional[str]:
    """Inside a worker, the credential of its work (``work:<id>:<key>``, from the ID and the
    work key its agent gave it): it reaches the work of the worker's own job, on any node, with
    no token file there. ``None`` outside a worker."""
    work_id = os.environ.get("BERTH_ACTOR_ID") or os.environ.get("BERTH_TASK_ID")
    key = os.environ.get("BERTH_WORK_KEY")
    return f"work:{work_id}:{key}" if work_id and key else None


def active_head(addresses: str, ca: Optional[str]) -> str:
    """Of a head's addresses, comma-separated (itself and its standbys), the URL of the first
    whose head is active: its ``/healthz`` says ``ok`` (a standby says ``standby``); the first
    when none answers."""
    urls = [a.strip() if "://" in a else f"http://{a.strip()}" for a in addresses.split(",") if a.strip()]
    if not urls:
        raise ValueError(f"address: {addresses!r} names no head")
    urls = [u.rstrip("/") for u in urls]
    if len(urls) == 1:
        return urls[0]
    for url in urls:
        try:
            client = Client(url, None, ca, timeout=2.0)
            if client.get("/healthz").get("status") == "ok":
                return url
        except Exception:  # unreachable, a standby's 503, TLS: try the next
            continue
    return urls[0]


class Client:
    """A REST client of one head; safe to share between threads."""

    def __init__(self, url: str, token: Optional[str], ca: Optional[str] = None, timeout: float = 30.0):
        if url.startswith("https://"):
            scheme, rest = "https", url[len("https://"):]
        elif url.startswith("http://"):
            scheme, rest = "http", url[len("http://"):]
        else:
            raise ValueError(f"address: {url!r} must be HOST:PORT, http://HOST:PORT or https://HOST:PORT")
        host, _, port = rest.partition(":")
        if not host:
            raise ValueError(f"address: {url!r} has no host")
        try:
            self.port = int(port.split("/")[0]) if port else DEFAULT_PORT
        except ValueError:
            raise ValueError(f"address: {url!r} has a port that is not a number") from None
        self.url, self.scheme, self.host = url, scheme, host
        self.token = token
        self.timeout = timeout
        self.ca = ca
        self._ssl: Optional[ssl.SSLContext] = None
        if scheme == "https":
            # Refused before any connection: without the CA nothing can prove the head's identity.
            if not ca:
                raise InvalidRequestError(
                    "ca", f"the head at {url} serves TLS: give the CA file (PEM) that signed its "
                    "certificate (berth.init(ca=FILE) or $BERTH_CA)"
                )
            # Trusts this CA and no other (the system's CAs are not loaded); hostnames are checked.
            try:
                self._ssl = ssl.create_default_context(cafile=ca)
            except OSError as e:  # a missing file, or one that holds no PEM certificate (SSLError)
                raise InvalidRequestError(
                    "ca", f"cannot read {ca} as a CA certificate (PEM) for the head at {url}: {e}") from None
        self._local = threading.local()

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            if self._ssl is not None:
                conn = http.client.HTTPSConnection(self.host, self.port, timeout=timeout, context=self._ssl)
            else:
                conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
            self._local.conn = conn
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        return conn

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
        self._local.conn = None

    def request(self, method: str, path: str, body: Any = None, query: Optional[Dict[str, Any]] = None,
                timeout: Optional[float] = None, allow: Tuple[int, ...] = ()) -> Tuple[int, Any]:
        """Sends one request; returns (status, JSON body). Statuses in ``allow`` and 2xx are
        returned; others raise ``RequestError`` (or a subclass)."""
        if query:
            path = f"{path}?{urlencode({k: v for k, v in query.items() if v is not None})}"
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        wait = timeout if timeout is not None else self.timeout
        # A kept-alive connection the head closed meanwhile fails on first use: retry once on a
        # new one. Only then: a request that reached the head is never sent twice.
        for attempt in (0, 1):
            conn = self._connection(wait)
            try:
                conn.request(method, path, body=data, headers=headers)
                response = conn.getresponse()
                raw = response.read()
                break
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
                self._drop()
                if attempt == 1:
                    raise _cut_off(f"the head at {self.url} closed the connection: {e}") from None
            except socket.timeout:
                self._drop()
                raise _cut_off(
                    f"the head at {self.url} did not answer {method} {path} within {wait:.0f} s"
                ) from None
            except ssl.SSLCertVerificationError as e:
                self._drop()
                # The caller's setting, not the network: never retried.
                raise InvalidRequestError(
                    "ca", f"the certificate of the head at {self.url} could not be verified with the CA file "
                    f"{self.ca}: {e.verify_message}; give the CA that signed it"
                ) from None
            except ssl.SSLError as e:
                self._drop()
                raise HeadUnreachableError(f"TLS with the head at {self.url} failed: {e}") from None
            except OSError as e:
                self._drop()
                raise HeadUnreachableError(
                    f"cannot reach the Berth head at {self.url}: {e.strerror or e}; is it running "
                    "(`berth up`, `berth start --head`)?"
                ) from None
        try:
            answer = json.loads(raw) if raw else None
        except ValueError:
            answer = raw.decode(errors="replace")
        status = response.status
        if 200 <= status < 300 or status in allow:
            return status, answer
        raise _error(status, answer, method, path)

    def get(self, path: str, **query: Any) -> Any:
        """GET ``path``; the JSON answer."""
        return self.request("GET", path, query=query or None)[1]

    def post(self, path: str, body: Any = None) -> Any:
        """POST ``path`` with a JSON body; the JSON answer."""
        return self.request("POST", path, body=body)[1]

    def create(self, path: str, body: Dict[str, Any]) -> Any:
        """POST a creation (an actor, a task, a placement group, or a batch of them) with an
        idempotency key (one per item of a batch), and send it again with the same key when it
        was cut off before its answer (the connection lost, no answer in time, or 503 while the
        head's store or lease moved): the head makes each object once, whatever reached it."""
        body = dict(body)
        if isinstance(body.get("items"), list):
            body["items"] = [_keyed(item) for item in body["items"]]
        else:
            body = _keyed(body)
        delay = 0.2
        for attempt in range(1, CREATE_ATTEMPTS + 1):
            try:
                answer = self.post(path, body)
                _warn_hints(answer)
                return answer
            except HeadUnreachableError as e:
                # Never reached a head (nothing listens): say so at once.
                if attempt == CREATE_ATTEMPTS or not (getattr(e, "maybe_sent", False) or attempt > 1):
                    raise
            except RequestError as e:
                if attempt == CREATE_ATTEMPTS or e.status != 503:
                    raise
            time.sleep(delay)
            delay = min(delay * 2, 2.0)
        raise AssertionError("unreachable")

    def delete(self, path: str, body: Any = None) -> Any:
        """DELETE ``path``; the JSON answer."""
        return self.request("DELETE", path, body=body)[1]


def _warn_hints(answer: Any) -> None:
    """Warns of the hints in a creation's answer (each item's, for a batch)."""
    if not isinstance(answer, dict):
        return
    created = [item.get("created") for item in answer.get("items", [])] or [answer]
    for obj in created:
        if not isinstance(obj, dict):
            continue
        name = obj.get("actor_id") or obj.get("task_id") or obj.get("group_id") or "request"
        for hint in (obj.get("diagnosis") or {}).get("hints", []):
            warnings.warn(f"{name}: {hint}", BerthHintWarning, stacklevel=4)


def _cut_off(message: str) -> HeadUnreachableError:
    """A request that may have reached the head but whose answer never came."""
    error = HeadUnreachableError(message)
    error.maybe_sent = True
    return error


def _keyed(body: Any) -> Any:
    """``body`` with an ``idempotency_key`` (a fresh one unless it has one)."""
    if isinstance(body, dict) and not body.get("idempotency_key"):
        body = dict(body)
        body["idempotency_key"] = f"berth-py-{uuid.uuid4().hex}"
    return body


def _error(status: int, answer: Any, method: str, path: str) -> RequestError:
    if isinstance(answer, dict):
        kind = str(answer.get("error", "error"))
        message = str(answer.get("message", answer))
        field = answer.get("field")
    else:
        kind, message, field = "error", str(answer), None
    if status == 401:
        message += " (berth.init(token=...) or $BERTH_TOKEN)"
    cls = {404: NotFoundError, 409: ConflictError}.get(status, RequestError)
    return cls(status, kind, f"{method} {path}: {message}" if status >= 500 else message, field)


def path_id(text: str) -> str:
    """An ID as one path segment."""
    return quote(text, safe="")
