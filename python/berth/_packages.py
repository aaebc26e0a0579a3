"""``runtime_env``'s ``working_dir`` and ``py_modules``: local directories (or module files) the
driver packs as zip archives, named by their content's hash, and serves from its owner service;
each node fetches a package once, into its agent's package cache (``$BERTH_PACKAGES``), and
every worker that needs it uses that copy.

A ``working_dir`` is the worker's current directory and first on its ``sys.path``; each of
``py_modules`` (a package directory or a ``.py`` file) is importable by its name."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import zipfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from .exceptions import InvalidRequestError

# A package's most bytes, packed (Ray's limit for working_dir uploads).
MAX_PACKAGE_BYTES = 100 << 20
# What is never packed: caches and version control.
SKIPPED = {"__pycache__", ".git", ".hg", ".svn", ".mypy_cache", ".pytest_cache", ".ruff_cache"}


def pack(field: str, path: object) -> Tuple[str, bytes]:
    """The archive of ``path`` (a directory: its contents; with ``keep_name``, under its name)
    and its content's hash; refuses what is not there or too big, naming ``field``."""
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise InvalidRequestError(field, f"{path!r} is not a local directory's path")
    root = Path(path).expanduser()
    if not root.exists():
        raise InvalidRequestError(field, f"{root} does not exist")
    return _zip(field, root, keep_name=field.startswith("runtime_env.py_modules"))


def _zip(field: str, root: Path, keep_name: bool) -> Tuple[str, bytes]:
    total = root.stat().st_size if root.is_file() else sum(
        p.stat().st_size for p in root.rglob("*") if p.is_file() and not SKIPPED.intersection(p.parts))
    if total > MAX_PACKAGE_BYTES:
        raise InvalidRequestError(field, f"{root} holds more than {MAX_PACKAGE_BYTES >> 20} MiB")
    if root.is_file():
        if root.suffix != ".py":
            raise InvalidRequestError(field, f"{root} is a file: give a directory, or a .py module")
        files = [(root, root.name)]
    else:
        base = root.parent if keep_name else root
        files = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIPPED)
            for name in sorted(filenames):
                full = Path(dirpath) / name
                files.append((full, full.relative_to(base).as_posix()))
    buf = io.BytesIO()
    digest = hashlib.sha256()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as archive:
        for full, arcname in files:
            data = full.read_bytes()
            digest.update(arcname.encode() + b"\0" + hashlib.sha256(data).digest())
            # A fixed date: the same files make the same archive.
            info = zipfile.ZipInfo(arcname, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = (full.stat().st_mode & 0o777) << 16
            archive.writestr(info, data, zipfile.ZIP_DEFLATED)
            if buf.tell() > MAX_PACKAGE_BYTES:
                raise InvalidRequestError(field, f"{root} packs to more than {MAX_PACKAGE_BYTES >> 20} MiB")
    return digest.hexdigest()[:32], buf.getvalue()


def runtime_env_packages(runtime_env: dict, packages: Dict[str, bytes],
                         packed: Dict[Tuple[str, str], str]) -> Dict[str, str]:
    """Packs ``runtime_env``'s ``working_dir`` and ``py_modules`` into ``packages`` (hash to
    archive, what the owner serves); the variables that tell the worker which to use. A path
    already packed in this session (``packed``: (field, path) to hash) is not packed again."""
    env: Dict[str, str] = {}

    def digest_of(field: str, path: object) -> str:
        key = (field.split("[")[0], str(path))
        if key not in packed:
            digest, data = pack(field, path)
            packages[digest] = data
            packed[key] = digest
        return packed[key]

    working_dir = runtime_env.get("working_dir")
    if working_dir is not None:
        env["BERTH_WORKING_DIR"] = digest_of("runtime_env.working_dir", working_dir)
    modules = runtime_env.get("py_modules")
    if modules is not None:
        if not isinstance(modules, (list, tuple)):
            raise InvalidRequestError("runtime_env.py_modules", "must be a list of local module directories or files")
        env["BERTH_PY_MODULES"] = ",".join(
            digest_of(f"runtime_env.py_modules[{i}]", module) for i, module in enumerate(modules))
    return env


def ensure(digest: str, fetch) -> Path:
    """The directory of package ``digest`` on this node: unpacked from ``fetch()`` (its archive's
    bytes) the first time, by whichever worker gets there first."""
    if len(digest) != 32 or any(c not in "0123456789abcdef" for c in digest):
        raise ValueError(f"{digest!r} is not a package's hash")
    cache = Path(os.environ.get("BERTH_PACKAGES") or Path.home() / ".berth" / "packages")
    target = cache / digest
    if target.is_dir():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    staging = cache / f".{digest}.{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        with zipfile.ZipFile(io.BytesIO(fetch())) as archive:
            for info in archive.infolist():
                if info.filename.startswith("/") or ".." in Path(info.filename).parts:
                    raise ValueError(f"package {digest} names a path outside itself: {info.filename}")
                archive.extract(info, staging)
                mode = (info.external_attr >> 16) & 0o777
                if mode:
                    os.chmod(staging / info.filename, mode)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    try:
        staging.rename(target)
    except OSError:
        # Another worker unpacked it first: theirs is the same.
        shutil.rmtree(staging, ignore_errors=True)
    return target


def apply(fetch_package) -> Optional[str]:
    """In a worker: the packages its runtime_env names, fetched once per node and put on
    ``sys.path`` (and the working directory made current); the working directory, if any."""
    import sys

    paths: List[str] = []
    for digest in filter(None, (os.environ.get("BERTH_PY_MODULES") or "").split(",")):
        paths.append(str(ensure(digest, lambda d=digest: fetch_package(d))))
    working = os.environ.get("BERTH_WORKING_DIR")
    directory = None
    if working:
        directory = str(ensure(working, lambda: fetch_package(working)))
        paths.insert(0, directory)
        os.chdir(directory)
    for path in reversed(paths):
        if path not in sys.path:
            sys.path.insert(0, path)
    return directory
