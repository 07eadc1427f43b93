"""The ledger-backed batch-size history: atomic begin, two concurrent runs, finish and abandon."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from plans.batch_size import BatchSizeConfig
from scheduler.store.batch_size_history import BatchSizeHistory
from scheduler.errors import LedgerError

CFG = BatchSizeConfig((16, 32, 64, 128), 64)


def test_two_concurrent_runs_do_not_explore_the_same_size(tmp_path):
    db = tmp_path / "ledger.sqlite3"
    rng = np.random.default_rng(0)
    with BatchSizeHistory(db) as h:
        tid, p = h.begin("nightly", CFG, rng)
        assert p.batch_size == 64 and p.phase == "default"
        h.finish(tid, cost=100.0, reached=True)
        a, pa = h.begin("nightly", CFG, rng)
    with BatchSizeHistory(db) as other:  # a second process, its own connection
        b, pb = other.begin("nightly", CFG, rng)
    assert (pa.batch_size, pa.phase) == (32, "explore")
    assert (pb.batch_size, pb.phase) == (64, "concurrent")
    with BatchSizeHistory(db) as h:
        h.finish(a, cost=80.0, reached=True)
        h.finish(b, cost=101.0, reached=True)
        assert [t.batch_size for t in h.history("nightly")] == [64, 32, 64]
        assert h.history("other-job") == []
        with pytest.raises(LedgerError, match="not pending"):
            h.finish(a, cost=1.0, reached=True)
        c, _ = h.begin("nightly", CFG, rng)
        h.abandon(c)
        assert len(h.history("nightly")) == 3


def test_threads_serialise_on_begin(tmp_path):
    db = tmp_path / "ledger.sqlite3"
    with BatchSizeHistory(db) as h:
        tid, _ = h.begin("j", CFG, np.random.default_rng(0))
        h.finish(tid, cost=100.0, reached=True)
    got: list[tuple[int, str]] = []

    def worker(seed: int) -> None:
        with BatchSizeHistory(db) as hh:
            _, p = hh.begin("j", CFG, np.random.default_rng(seed))
            got.append((p.batch_size, p.phase))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got).count((32, "explore")) == 1  # exactly one run explores 32; the rest run the best size
