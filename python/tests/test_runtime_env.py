"""``runtime_env``: ``env_vars``, ``working_dir`` (a local directory: the worker's current
directory and first on its path) and ``py_modules`` (importable by name), packed by the driver,
fetched once per node from it (never through the head) and cached by content hash; anything
else is refused naming the field."""

from __future__ import annotations

import os

import pytest

import berth
from berth.exceptions import InvalidRequestError


def _where():
    import helper_mod  # noqa: F401 - from the working_dir
    import mypkg  # noqa: F401 - from py_modules

    with open("data.txt") as f:
        data = f.read()
    return {"data": data, "helper": helper_mod.VALUE, "pkg": mypkg.NAME, "cwd": os.getcwd(),
            "node": os.environ["BERTH_NODE_ID"], "env": os.environ.get("MY_VAR")}


@berth.remote(num_cpus=0.1)
def where():
    return _where()


@berth.remote(num_cpus=0.1)
class There:
    def where(self):
        return _where()


def test_working_dir_and_py_modules_reach_the_worker(berth_session, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "data.txt").write_text("from the driver")
    (work / "helper_mod.py").write_text("VALUE = 41 + 1\n")
    (work / "__pycache__").mkdir()
    (work / "__pycache__" / "junk.pyc").write_bytes(b"never packed")
    pkg = tmp_path / "mods" / "mypkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("NAME = 'mypkg'\n")
    env = {"working_dir": str(work), "py_modules": [str(pkg)], "env_vars": {"MY_VAR": "set"}}

    answers = berth.get([where.options(runtime_env=env).remote() for _ in range(3)], timeout=60)
    for answer in answers:
        assert (answer["data"], answer["helper"], answer["pkg"], answer["env"]) == (
            "from the driver", 42, "mypkg", "set"), answer
    actor = There.options(runtime_env=env).remote()
    assert berth.get(actor.where.remote(), timeout=60)["data"] == "from the driver"
    # One copy per node, named by its content, shared by every worker there.
    nodes = {a["node"] for a in answers}
    for node in nodes:
        cached = sorted(p.name for p in (berth_session.data_dir / "agents" / node / "packages").iterdir())
        assert len(cached) == 2 and all(not name.startswith(".") for name in cached), cached
        assert any(a["cwd"].endswith(cached[0]) or a["cwd"].endswith(cached[1]) for a in answers)
    assert not any("__pycache__" in str(p) for p in (berth_session.data_dir / "agents").rglob("junk.pyc"))


def test_what_runtime_env_cannot_do_is_refused_naming_the_field(berth_session, tmp_path):
    with pytest.raises(InvalidRequestError) as info:
        where.options(runtime_env={"pip": ["requests"]}).remote()
    assert info.value.field == "runtime_env.pip" and "install" in str(info.value)
    with pytest.raises(InvalidRequestError) as info:
        where.options(runtime_env={"working_dir": str(tmp_path / "missing")}).remote()
    assert info.value.field == "runtime_env.working_dir" and "does not exist" in str(info.value)
    with pytest.raises(InvalidRequestError) as info:
        where.options(runtime_env={"py_modules": "mypkg"}).remote()
    assert info.value.field == "runtime_env.py_modules"
