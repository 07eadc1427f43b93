"""Policy checks beyond the schema: carbon sources and job.callable are validated at load time,
so a typo stops `policy check`/`run` with one `file:line:col:` line instead of a silent failover."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.errors import PolicyError
from scheduler.policy.loader import load_policy, parse_policy

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
EXAMPLE = (EXAMPLES / "policy.yaml").read_text(encoding="utf-8")


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def _error(text: str) -> PolicyError:
    with pytest.raises(PolicyError) as info:
        parse_policy(text, where="p.yaml", base_dir=EXAMPLES)
    assert "\n" not in str(info.value)
    return info.value


def test_example_policy_still_loads() -> None:
    assert load_policy(REPO / "examples" / "policy.yaml").carbon.provider == "trace"


def test_misspelt_provider_names_the_known_ones() -> None:
    text = EXAMPLE.replace("provider: trace", "provider: trcae")
    err = _error(text)
    assert str(err).startswith(f"p.yaml:{_line_of(text, 'trcae')}:13: carbon.provider: unknown carbon provider 'trcae'")
    assert "trace" in str(err) and "static" in str(err) and "electricitymaps" in str(err)


def test_misspelt_fallback_provider_points_at_the_fallback() -> None:
    text = EXAMPLE.replace("- provider: static", "- provider: statik")
    err = _error(text)
    assert str(err).startswith(f"p.yaml:{_line_of(text, 'statik')}:")
    assert "carbon.fallbacks.0.provider: unknown carbon provider 'statik'" in str(err)


def test_unknown_option_points_at_the_key() -> None:
    text = EXAMPLE.replace("column: hist", "colum: hist")
    err = _error(text)
    assert str(err).startswith(f"p.yaml:{_line_of(text, 'colum:')}:5: carbon.options.colum: unknown option 'colum'")
    assert "column" in str(err) and "path" in str(err)


def test_http_provider_options_include_the_shared_http_ones() -> None:
    ok = EXAMPLE.replace("provider: trace", "provider: ukgrid").replace("column: hist", "timeout_s: 5")
    assert parse_policy(ok, where="p.yaml", base_dir=EXAMPLES).carbon.options == {"timeout_s": 5}
    err = _error(ok.replace("timeout_s: 5", "transport: x"))  # a code seam, not a policy option
    assert "carbon.options.transport: unknown option 'transport' for provider 'ukgrid'" in str(err)


def test_missing_trace_file_is_reported_at_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "missing.csv"
    text = EXAMPLE.replace("column: hist", f"path: {missing}")
    err = _error(text)
    assert str(err).startswith(f"p.yaml:{_line_of(text, 'missing.csv')}:11: carbon.options.path: ")
    assert "trace file not found" in str(err)


def test_trace_file_with_wrong_column_is_reported_at_the_column(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("timestamp,g\n2024-01-01T00:00,5\n2024-01-01T01:00,6\n", encoding="utf-8")
    text = EXAMPLE.replace("column: hist", f"path: {trace}\n    column: hist")
    err = _error(text)
    assert str(err).startswith(f"p.yaml:{_line_of(text, 'column: hist')}:13: carbon.options.column: ")
    assert "no column named 'hist'" in str(err)
    assert parse_policy(text.replace("column: hist", "column: g"), where="p.yaml", base_dir=EXAMPLES).carbon.options["column"] == "g"


def test_relative_trace_path_is_read_against_the_policy_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "conf"
    folder.mkdir()
    (folder / "t.csv").write_text("timestamp,g\n2024-01-01T00:00,5\n", encoding="utf-8")
    (folder / "train_tiny.py").write_text("", encoding="utf-8")
    policy_file = folder / "p.yaml"
    policy_file.write_text(EXAMPLE.replace("column: hist", "path: t.csv"), encoding="utf-8")
    monkeypatch.chdir(tmp_path)  # anywhere but the policy's folder
    assert load_policy("conf/p.yaml").carbon.options["path"] == str(folder / "t.csv")
    (folder / "t.csv").unlink()
    assert "trace file not found" in str(_error(policy_file.read_text(encoding="utf-8")))


def test_unparseable_trace_file_reports_the_trace_message(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("timestamp,g\nyesterday,5\n", encoding="utf-8")
    err = _error(EXAMPLE.replace("column: hist", f"path: {trace}"))
    assert "carbon.options.path: " in str(err) and "cannot parse timestamp 'yesterday'" in str(err)


def test_sample_trace_column_is_checked_without_a_path() -> None:
    err = _error(EXAMPLE.replace("column: hist", "column: hsit"))
    assert "carbon.options.column: " in str(err) and "no column named 'hsit'" in str(err)


def test_unknown_static_country() -> None:
    text = EXAMPLE.replace("country: USA", "country: XYZ")
    err = _error(text)
    assert str(err).startswith(f"p.yaml:{_line_of(text, 'XYZ')}:")
    assert "carbon.fallbacks.0.options.country: " in str(err) and "unknown country 'XYZ'" in str(err)


def test_several_problems_report_the_first_and_count_the_rest() -> None:
    err = _error(EXAMPLE.replace("provider: trace", "provider: trcae").replace("country: USA", "country: XYZ"))
    assert "carbon.provider:" in str(err) and str(err).endswith("[and 1 more error(s)]")
    assert err.more == 1


@pytest.mark.parametrize(
    "mutation, expect",
    [
        (("provider: trace", "provider: trcae"), "carbon.provider: unknown carbon provider 'trcae'"),
        (("column: hist", "colum: hist"), "carbon.options.colum: unknown option 'colum'"),
        (("column: hist", "path: /nonexistent/gridshift/missing.csv"), "carbon.options.path: "),
    ],
)
@pytest.mark.parametrize("command", ["policy check", "run"])
def test_cli_stops_with_exit_2_and_one_line(tmp_path: Path, mutation: tuple[str, str], expect: str, command: str) -> None:
    from typer.testing import CliRunner

    from flows.cli import app

    bad = tmp_path / "bad.yaml"
    bad.write_text(EXAMPLE.replace(*mutation), encoding="utf-8")
    (tmp_path / "train_tiny.py").write_text("", encoding="utf-8")
    result = CliRunner().invoke(app, [*command.split(), str(bad)])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and f"{bad}:" in lines[0] and expect in lines[0], lines


def _with_callable(target: str) -> str:
    text = EXAMPLE.replace('command: [python, train_tiny.py, --epochs, "20"]', f"callable: {target!r}")
    assert "callable:" in text
    return text


def test_callable_with_unknown_module_points_at_the_line() -> None:
    text = _with_callable("nosuchmod:main")
    err = _error(text)
    assert str(err).startswith(f"p.yaml:{_line_of(text, 'callable:')}:13: job.callable: module 'nosuchmod' not found")


def test_callable_with_unknown_submodule_of_a_real_package() -> None:
    assert "module 'json.nosuch' not found" in str(_error(_with_callable("json.nosuch:main")))
    assert "module 'json.decoder.x' not found" in str(_error(_with_callable("json.decoder.x:main")))  # not a package


def test_callable_in_a_found_module_passes_without_importing_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "gs_probe_pkg"
    pkg.mkdir()
    # importing the package would fail the test: the check must find it, not run it
    (pkg / "__init__.py").write_text('raise RuntimeError("user code was imported")\n', encoding="utf-8")
    (pkg / "train.py").write_text("def main():\n    return 0\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    for target in ("gs_probe_pkg.train:main", "gs_probe_pkg:main"):
        assert parse_policy(_with_callable(target), where="p.yaml", base_dir=EXAMPLES).job.callable == target
    assert "module 'gs_probe_pkg.nope' not found" in str(_error(_with_callable("gs_probe_pkg.nope:main")))
    import sys

    assert "gs_probe_pkg" not in sys.modules


def test_callable_in_an_imported_module_passes() -> None:
    assert parse_policy(_with_callable("scheduler.policy.loader:load_policy"), where="p.yaml", base_dir=EXAMPLES).job.callable


def test_duplicate_key_is_rejected_at_the_second_occurrence() -> None:
    text = EXAMPLE.replace("  zone: MISO_MASON_CITY", "  zone: MISO_MASON_CITY\n  zone: DE")
    err = _error(text)
    assert str(err).startswith(f"p.yaml:{_line_of(text, 'zone: DE')}:3: duplicate key 'zone' (first given at line {_line_of(text, 'zone: MISO')}")


def test_duplicate_key_in_a_flow_mapping_and_at_top_level() -> None:
    assert "duplicate key 'country'" in str(_error(EXAMPLE.replace("{country: USA}", "{country: USA, country: DEU}")))
    text = EXAMPLE + "\nbackend:\n  name: simulated\n"
    assert str(_error(text)).startswith(f"p.yaml:{len(text.splitlines()) - 1}:1: duplicate key 'backend'")


def test_same_key_in_different_mappings_is_fine() -> None:
    assert parse_policy(EXAMPLE, where="p.yaml", base_dir=EXAMPLES).modes["efficiency"].power_limit_fraction == 0.6  # 'power_limit_fraction' twice


def test_unknown_key_is_reported_before_the_missing_key_it_explains() -> None:
    text = EXAMPLE.replace("\nrules:\n", "\nrule:\n")
    err = _error(text)
    # rules may be omitted (the planner is the default), so the typo is the only error left
    assert str(err) == f"p.yaml:{_line_of(text, 'rule:')}:1: rule: unknown key 'rule' (did you mean 'rules'?)"
    assert err.more == 0


def test_error_order_is_otherwise_kept() -> None:
    text = EXAMPLE.replace("expected_duration_s: 5", "expected_duration_s: -1").replace("interval_s: 600", "interval_s: -1")
    assert "rules.interval_s" in str(_error(text))  # the earlier of two value errors, as before
