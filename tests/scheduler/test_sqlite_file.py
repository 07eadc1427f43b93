"""Processes that open one new SQLite file at the same moment all get a WAL connection."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

from carbon.sqlite_file import connect_wal


def _open(db: str, start, out) -> None:
    start.wait()
    try:
        con = connect_wal(db, isolation_level=None)
        con.execute("BEGIN IMMEDIATE")
        con.execute("CREATE TABLE IF NOT EXISTS t (x)")
        con.execute("COMMIT")
        out.put(con.execute("PRAGMA journal_mode").fetchone()[0])
    except Exception as exc:  # the parent asserts on what came back
        out.put(repr(exc))


def test_simultaneous_opens_of_a_new_file_all_succeed(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")  # cheap; the target touches only sqlite3
    for round_ in range(6):  # the unguarded race failed about one round in five
        db = str(tmp_path / f"f{round_}.sqlite3")
        start, out = ctx.Barrier(6), ctx.Queue()
        procs = [ctx.Process(target=_open, args=(db, start, out)) for _ in range(6)]
        for p in procs:
            p.start()
        got = [out.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(timeout=30)
        assert got == ["wal"] * 6
