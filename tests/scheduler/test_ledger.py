from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from scheduler.errors import LedgerError
from scheduler.store.ledger import Ledger, gridshift_home


def _report(run_id: str, started: str, job: str = "j") -> dict:
    return {"run_id": run_id, "started_at": started, "policy": "p.yaml", "job": job, "status": "completed",
            "backend": "simulated", "energy_j": 1.0, "carbon_g": 0.1, "duration_s": 2.0, "modes": []}


def test_record_and_list_newest_first(tmp_path: Path) -> None:
    with Ledger(tmp_path / "l.sqlite3") as ledger:
        ledger.record(_report("a", "2026-01-01T00:00:00+00:00"))
        ledger.record(_report("b", "2026-01-02T00:00:00+00:00", job="other"))
        assert [r["run_id"] for r in ledger.runs()] == ["b", "a"]
        assert [r["run_id"] for r in ledger.runs(job="j")] == ["a"]
    # survives reopening
    with Ledger(tmp_path / "l.sqlite3") as ledger:
        assert len(ledger.runs()) == 2


def test_default_location_follows_gridshift_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GRIDSHIFT_HOME", str(tmp_path / "home"))
    assert gridshift_home() == tmp_path / "home"
    with Ledger() as ledger:
        assert ledger.path == tmp_path / "home" / "ledger.sqlite3"


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite3"
    Ledger(path).close()
    db = sqlite3.connect(path)
    db.execute("UPDATE schema_version SET version = 99")
    db.commit()
    db.close()
    with pytest.raises(LedgerError, match="newer"):
        Ledger(path)


def test_get_by_run_id(tmp_path: Path) -> None:
    with Ledger(tmp_path / "l.sqlite3") as ledger:
        for i in range(60):
            ledger.record(_report(f"r{i}", f"2026-01-01T00:{i:02d}:00+00:00"))
        assert ledger.get("r0")["run_id"] == "r0"  # older than any "recent runs" window
        assert ledger.get("nope") is None


def test_the_ledger_is_the_owners_only(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (tmp_path / "old").mkdir()
    old = tmp_path / "old" / "ledger.sqlite3"
    old.touch(mode=0o644)  # an older gridshift's ledger, made with the umask's mode
    with Ledger(old):
        pass
    assert old.stat().st_mode & 0o777 == 0o600
    with Ledger(home / "ledger.sqlite3") as ledger:
        ledger.record(_report("r1", "2026-01-01T00:00:00+00:00"))
        files = sorted(home.iterdir())  # while open: the -wal and -shm files too
        assert [f.name for f in files] == ["ledger.sqlite3", "ledger.sqlite3-shm", "ledger.sqlite3-wal"]
        assert {f.name: f.stat().st_mode & 0o777 for f in files} == {f.name: 0o600 for f in files}
    assert home.stat().st_mode & 0o777 == 0o700
