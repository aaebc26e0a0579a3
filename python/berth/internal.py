"""``berth.internal``: what this process holds of Berth's objects, for finding where memory goes.

    >>> berth.internal.stats()
    {'owned': {'objects': 1, 'bytes': 104857615}, 'borrowed': {'objects': 0, 'bytes': 0},
     'lent': {'objects': 1, 'borrowers': 1, 'refs_in_flight': 0, 'bytes': 104857615}}

The figures are of this process only: each process that holds objects (the driver, a task's
or actor's worker) answers for itself.
"""

from __future__ import annotations

import sys
from typing import Dict


def stats() -> Dict[str, Dict[str, int]]:
    """This process's objects, each counted once however many refs name it, and its bytes as
    they travel (pickled):

    - ``owned``: values this process holds as their owner (what it put, the results of the
      work it submitted) that some ref here still names.
    - ``borrowed``: values of other processes fetched here that some ref here still names.
    - ``lent``: its own values that other processes hold refs to (``borrowers``: their
      connections) or that refs on their way name (``refs_in_flight``).
    """
    objects = sys.modules.get("berth._objects")
    owned = {"objects": 0, "bytes": 0}
    borrowed = {"objects": 0, "bytes": 0}
    if objects is not None:
        for state in list(objects._held):
            side = owned if state.origin is None else borrowed
            side["objects"] += 1
            side["bytes"] += state.size
    runtime = getattr(sys.modules.get("berth._runtime"), "_current", None)
    lent = runtime.owner.lending() if runtime is not None else {
        "objects": 0, "borrowers": 0, "refs_in_flight": 0, "bytes": 0}
    return {"owned": owned, "borrowed": borrowed, "lent": lent}
