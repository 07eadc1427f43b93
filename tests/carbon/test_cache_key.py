"""The cache key: a source with other options (another trace file or column) never reads this
one's cached values, secrets never reach a file name, and cached answers say they are cached."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from carbon.cache import cache_key
from carbon.errors import ProviderUnreachable
from carbon.monitor import AllSourcesFailed, CarbonMonitor, SourceSpec
from carbon.providers.base import Provider
from carbon.providers.trace import TraceProvider
from carbon.series import IntensityPoint

T0 = datetime(2024, 1, 1, 12, 0, tzinfo=timezone.utc)


def _trace(path: Path, value_g_per_kwh: float) -> Path:
    rows = [f"2024-01-01T{h:02d}:00,{value_g_per_kwh},{value_g_per_kwh + 1000}" for h in range(24)]
    path.write_text("timestamp,a,b\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return path


class _Down(Provider):
    name = "down"

    def current(self, *, now: datetime) -> IntensityPoint:
        raise ProviderUnreachable("down", provider=self.name)


def _spec(path: Path, column: str, *, down: bool = False) -> SourceSpec:
    options = {"provider": "trace", "path": str(path), "column": column}
    build = _Down if down else (lambda: TraceProvider(path, column=column, replay="aligned"))
    return SourceSpec("trace", build, options=options)


def test_other_trace_file_or_column_is_not_served_the_previous_cache(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    a, b = _trace(tmp_path / "a.csv", 100.0), _trace(tmp_path / "b.csv", 200.0)
    assert CarbonMonitor([_spec(a, "a")], cache_dir=cache).read(T0).current.g_per_kwh == 100.0
    # the same label ("trace") with another file, then another column: both fetch their own data
    # and, when their source is down, find no cache of their own rather than a's values
    for spec, want in ((_spec(b, "a"), 200.0), (_spec(a, "b"), 1100.0)):
        assert CarbonMonitor([spec], cache_dir=cache).read(T0).current.g_per_kwh == want
    assert len(list(cache.glob("trace_*.json"))) == 3
    c = _trace(tmp_path / "c.csv", 300.0)
    with pytest.raises(AllSourcesFailed, match="no carbon source answered"):
        CarbonMonitor([_spec(c, "a", down=True)], cache_dir=cache).read(T0 + timedelta(minutes=5))


def test_a_reading_from_cache_says_so(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    a = _trace(tmp_path / "a.csv", 100.0)
    live = CarbonMonitor([_spec(a, "a")], cache_dir=cache).read(T0)
    assert (live.served_from, live.stale) == ("live", False)
    # a restart with the source down: the same source and options find their cache on disk
    cached = CarbonMonitor([_spec(a, "a", down=True)], cache_dir=cache).read(T0 + timedelta(minutes=5))
    assert (cached.served_from, cached.stale, cached.source) == ("cache", True, "trace")
    assert cached.fetched_at == T0 and cached.current.g_per_kwh == 100.0
    assert "cached at" in cached.reason and "stale" in cached.reason


def test_key_is_the_label_alone_without_identifying_options() -> None:
    assert cache_key("static") == "static"
    assert cache_key("static", {}) == "static"
    assert cache_key("x", {"client": object(), "sleep": print}) == "x"  # code seams are not identity


def test_key_is_stable_short_and_order_independent() -> None:
    one = cache_key("trace[MISO]", {"path": "/data/t.csv", "column": "hist", "kind": "marginal"})
    two = cache_key("trace[MISO]", {"kind": "marginal", "column": "hist", "path": "/data/t.csv"})
    assert one == two and one.startswith("trace[MISO]#") and len(one) == len("trace[MISO]#") + 8
    assert one != cache_key("trace[MISO]", {"path": "/data/t.csv", "column": "marginal"})
    assert cache_key("em", {"base_url": "http://a"}) != cache_key("em", {"base_url": "http://b"})


def test_relative_paths_are_keyed_by_the_file_they_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    here = cache_key("trace", {"path": "t.csv"})
    assert here == cache_key("trace", {"path": str(tmp_path / "t.csv")})
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    assert cache_key("trace", {"path": "t.csv"}) != here


def test_secrets_never_change_or_reach_the_key(tmp_path: Path) -> None:
    base = {"zone": "DE", "base_url": "https://api.example"}
    key = cache_key("electricitymaps[DE]", base)
    for secret in ({"token": "s3cret"}, {"password": "pw", "username": "me"}, {"api_key": "k"}, {"token_block": "T"}):
        assert cache_key("electricitymaps[DE]", {**base, **secret}) == key
    assert "s3cret" not in key


def test_old_label_only_files_still_load_for_sources_without_options(tmp_path: Path) -> None:
    from carbon.providers.static import StaticProvider

    CarbonMonitor([SourceSpec("static", lambda: StaticProvider(g_per_kwh=7))], cache_dir=tmp_path).read(T0)
    assert (tmp_path / "static.json").exists()


def test_policy_sources_carry_their_options_into_the_cache_key(tmp_path: Path) -> None:
    from flows.sources import monitor_for
    from scheduler.policy.loader import parse_policy

    trace = _trace(tmp_path / "a.csv", 100.0)
    examples = Path(__file__).resolve().parents[2] / "examples"
    text = (examples / "policy.yaml").read_text(encoding="utf-8")
    policy = parse_policy(text.replace("column: hist", f"path: {trace}\n    column: a"), where="p.yaml", base_dir=examples)
    keys = [spec.cache_key for spec in monitor_for(policy).sources]
    assert keys[0] != "trace[MISO_MASON_CITY]" and keys[0].startswith("trace[MISO_MASON_CITY]#")
