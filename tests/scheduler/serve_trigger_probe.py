"""A trigger for service tests: appends one line per call to the file named by GRIDSHIFT_PROBE_FILE."""

from __future__ import annotations

import json
import os
import threading

FIRED = threading.Event()


def record(*, key: str, **kwargs: object) -> None:
    with open(os.environ["GRIDSHIFT_PROBE_FILE"], "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"key": key, **kwargs}) + "\n")
    FIRED.set()
