"""The scheduling room of the CLI: ``simulate``, ``deploy`` and ``serve`` register themselves on import."""

from flows.cli import deploy as _deploy  # noqa: F401
from flows.cli import simulate as _simulate  # noqa: F401
