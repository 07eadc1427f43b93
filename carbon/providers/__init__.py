"""Grid-intensity providers, one per file, all behind :class:`carbon.providers.base.Provider`."""

from carbon.providers.base import Provider
from carbon.providers.registry import PROVIDERS, get_provider, provider_names

__all__ = ["Provider", "PROVIDERS", "get_provider", "provider_names"]
