"""Reading an archive of issued forecasts: real exports have blanks, BOMs, extra columns and mistakes."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest

from carbon.errors import BadTrace
from carbon.forecasts.issued import read_issued_forecasts

T = datetime(2024, 1, 1, tzinfo=timezone.utc).timestamp()


def _write(tmp_path: Path, text: str, *, bom: bool = False) -> Path:
    f = tmp_path / "issued.csv"
    f.write_bytes(("\ufeff" if bom else "").encode() + text.encode())
    return f


def test_issues_are_grouped_and_sorted_whatever_the_row_order(tmp_path: Path) -> None:
    f = _write(tmp_path, "issued_at,valid_for,g\n"
                         "2024-01-01T01:00Z,2024-01-01T03:00Z,30\n"
                         "2024-01-01 00:00,2024-01-01 02:00,200\n"
                         "2024-01-01 00:00,2024-01-01 01:00,100\n"
                         "2024-01-01T01:00:00+00:00,2024-01-01T02:00:00+00:00,20\n")
    fc = read_issued_forecasts(f)
    assert fc.issued_s == [T, T + 3600]
    assert fc.valid_s[0].tolist() == [T + 3600, T + 7200] and fc.values[0].tolist() == [100.0, 200.0]
    assert fc.values[1].tolist() == [20.0, 30.0]


def test_a_bom_and_blank_cells_of_an_export_are_read(tmp_path: Path) -> None:
    # a spreadsheet export: BOM, a region label, an "actual" column filled only for the past
    f = _write(tmp_path, "issued_at,valid_for,region,forecast,actual\n"
                         "2024-01-01 00:00,2024-01-01 00:00,GB,90,95\n"
                         "2024-01-01 00:00,2024-01-01 01:00,GB,100,\n"
                         "2024-01-01 00:00,2024-01-01 02:00,GB,,\n"
                         "2024-01-01 00:00,2024-01-01 03:00,GB,NaN,\n\n", bom=True)
    with pytest.raises(BadTrace, match=r"issued\.csv:1: several value columns \(forecast, actual\)"):
        read_issued_forecasts(f)
    fc = read_issued_forecasts(f, column="forecast")
    assert fc.values[0].tolist() == [90.0, 100.0]  # the blank and NaN cells were not forecast


@pytest.mark.parametrize(("text", "message"), [
    ("issued_at,valid_for,g\n2024-01-01 00:00,tomorrow,1\n", r"issued\.csv:2: issued_at and valid_for must be times, not 'tomorrow'"),
    ("issued_at,valid_for,g\n2024-01-01 00:00,2024-01-01 01:00,1\n2024-01-01 00:00,2024-01-01 02:00,high\n",
     r"issued\.csv:3: g must be a number, not 'high'"),
    ("issued_at,valid_for,g\n2024-01-01 00:00,2024-01-01 01:00,-5\n", r"issued\.csv:2: g must be a finite gCO2/kWh >= 0"),
    ("issued_at,valid_for,zone,g\n2024-01-01 00:00,2024-01-01 01:00,DE,1\n2024-01-01 00:00,2024-01-01 01:00,FR,2\n",
     r"issued\.csv:3: a second value for the same issued_at and valid_for as line 2; one zone per file"),
    ("issued_at,valid_for,zone\n2024-01-01 00:00,2024-01-01 01:00,DE\n", r"issued\.csv:2: zone must be a number, not 'DE'"),
    ("issued_at,valid_for,zone,note\n2024-01-01 00:00,2024-01-01 01:00,DE,x\n", r"issued\.csv:2: no numeric value column"),
    ("issued_at,valid_for,g\n2024-01-01 00:00,2024-01-01 01:00,\n", r"issued\.csv: no forecast values \(every g cell"),
    ("issued_at,valid_for\n2024-01-01 00:00,2024-01-01 01:00\n", r"issued\.csv:1: needs issued_at, valid_for and a value"),
])
def test_bad_archives_get_one_line_with_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(BadTrace, match=message):
        read_issued_forecasts(_write(tmp_path, text))


def test_a_named_column_with_no_values_is_refused(tmp_path: Path) -> None:
    f = _write(tmp_path, "issued_at,valid_for,forecast,actual\n2024-01-01 00:00,2024-01-01 01:00,,5\n")
    with pytest.raises(BadTrace, match=r"issued\.csv: no forecast values \(every forecast cell is empty\)"):
        read_issued_forecasts(f, column="forecast")


def test_each_time_gets_the_newest_issue_that_covers_it(tmp_path: Path) -> None:
    # a day-ahead archive: issued at noon for the whole next day; at 21:00 tonight is yesterday's issue
    rows = ["issued_at,valid_for,g"]
    for day, level in ((1, 100), (2, 200)):
        for h in range(24):
            rows.append(f"2024-01-0{day} 12:00,2024-01-0{day + 1} {h:02d}:00,{level + h}")
    fc = read_issued_forecasts(_write(tmp_path, "\n".join(rows) + "\n"))
    at = datetime(2024, 1, 2, 21, tzinfo=timezone.utc).timestamp()
    got = fc.on_grid(at, at, 3600, 6)  # 21:00 .. 02:00
    assert got.tolist() == [121.0, 122.0, 123.0, 200.0, 201.0, 202.0]
    # nothing issued by then covers the day after tomorrow
    assert np.isnan(fc.on_grid(at, at + 2 * 86400, 3600, 2)).all()
    assert fc.on_grid(T - 1, T, 3600, 1) is None  # before the first issue
    # an issue made after the decision is not seen, even where it covers
    early = datetime(2024, 1, 2, 11, tzinfo=timezone.utc).timestamp()
    assert np.isnan(fc.on_grid(early, at + 3 * 3600, 3600, 1)).all()
