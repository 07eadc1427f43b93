"""Where the log lines of one ``gridshift run`` go.

- the job's output: to the terminal, plainly, line by line as the job writes it;
- gridshift's own lines (the decision, mode changes, waits): ``gridshift: ...``; warnings
  ``gridshift: warning: ...``, one line each (tracebacks go to the log file only);
- Prefect's own records (engine states, task runs, client and server notes): to the run's log file
  only, unless ``verbose`` (``gridshift run -v``) shows them on the terminal too.

The log file (``$GRIDSHIFT_HOME/logs/<run id>.log``, 0600 in a 0700 folder) gets every record, with time, level and logger,
and the temporary Prefect server's output; the newest :data:`KEEP_LOGS` files are kept.

Records are told apart without touching the code that makes them: Prefect's come from files inside
the ``prefect`` package, the job's from the thread that pumps its output
(:data:`flows.job.process.OUTPUT_THREAD_NAME`). Installed before Prefect is imported, these handlers also
keep Prefect from adding its own console handler (it leaves a root logger with handlers alone).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator

from flows.job.process import OUTPUT_THREAD_NAME
from scheduler.store.ledger import gridshift_home, private_dir, private_file

__all__ = ["KEEP_LOGS", "logs_dir", "run_logging"]

#: how many run log files ``$GRIDSHIFT_HOME/logs`` keeps (oldest removed first)
KEEP_LOGS = 50

_FILE_FORMAT = "%(asctime)s.%(msecs)03d | %(levelname)-7s | %(threadName)s | %(source)s - %(message)s"
_VERBOSE_FORMAT = "%(asctime)s.%(msecs)03d | %(levelname)-7s | %(name)s - %(message)s"


def logs_dir() -> Path:
    """``$GRIDSHIFT_HOME/logs``."""
    return gridshift_home() / "logs"


def _prefect_dir() -> str:
    spec = importlib.util.find_spec("prefect")  # finds the package without importing it (seconds)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return os.path.join(locations[0], "") if locations else "\0"  # "\0": no path starts with it


class _FileFormat(logging.Formatter):
    """Names the Prefect task or flow run a record belongs to, as Prefect's console does."""

    def __init__(self) -> None:
        super().__init__(_FILE_FORMAT, datefmt="%H:%M:%S")

    def format(self, record: logging.LogRecord) -> str:
        task, flow = getattr(record, "task_run_name", None), getattr(record, "flow_run_name", None)
        record.source = f"Task run {task!r}" if task else f"Flow run {flow!r}" if flow else record.name
        return super().format(record)


class _Console(logging.Formatter):
    """Formats and picks the records that reach the terminal."""

    def __init__(self, verbose: bool) -> None:
        super().__init__(_VERBOSE_FORMAT, datefmt="%H:%M:%S")
        self.verbose = verbose
        self.prefect_dir = _prefect_dir()

    def shows(self, record: logging.LogRecord) -> bool:
        if record.threadName == OUTPUT_THREAD_NAME or self.verbose:
            return True
        return not record.pathname.startswith(self.prefect_dir)

    def format(self, record: logging.LogRecord) -> str:
        if record.threadName == OUTPUT_THREAD_NAME:
            return record.getMessage()
        if record.pathname.startswith(self.prefect_dir):  # only with verbose
            return super().format(record)
        level = "" if record.levelno < logging.WARNING else f"{record.levelname.lower()}: "
        return f"gridshift: {level}{record.getMessage()}"


class _ConsoleHandler(logging.StreamHandler):  # type: ignore[type-arg]
    def __init__(self, stream: IO[str], verbose: bool) -> None:
        super().__init__(stream)
        self.console = _Console(verbose)
        self.setFormatter(self.console)
        self.addFilter(self.console.shows)


def _prune(folder: Path, keep: int) -> None:
    try:
        logs = sorted(folder.glob("*.log"), key=lambda p: p.stat().st_mtime)
    except OSError:
        return
    for old in logs[:-keep] if len(logs) > keep else []:
        try:
            old.unlink()
        except OSError:
            pass


@contextmanager
def run_logging(log_path: Path, *, verbose: bool = False, stream: IO[str] | None = None) -> Iterator[Path | None]:
    """Send log records as described above while the block runs; yields ``log_path``, or None when
    it cannot be written (the pre-flight checks then say why the home folder is unusable).

    Prefect's console handler on the root logger (when Prefect was configured before) is taken
    off for the block and put back afterwards.
    """
    root = logging.getLogger()
    to_file: logging.Handler | None
    try:
        private_dir(log_path.parent)
        _prune(log_path.parent, KEEP_LOGS - 1)
        # 0600: the job's output and its environment's paths are the user's (scheduler.store.ledger)
        to_file = logging.FileHandler(private_file(log_path), encoding="utf-8")
    except OSError:
        to_file = None
    console = _ConsoleHandler(stream if stream is not None else sys.stderr, verbose)
    prefects = [h for h in root.handlers if type(h).__name__ == "PrefectConsoleHandler"]
    for handler in prefects:
        root.removeHandler(handler)
    if to_file is not None:
        to_file.setFormatter(_FileFormat())
        root.addHandler(to_file)
    root.addHandler(console)
    try:
        yield log_path if to_file is not None else None
    finally:
        root.removeHandler(console)
        if to_file is not None:
            root.removeHandler(to_file)
            to_file.close()
        for handler in prefects:
            root.addHandler(handler)
