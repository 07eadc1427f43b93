"""Sites: where a job may run. The policy as seen at one site; pure.

A site is a GPU node on its own grid (see :class:`scheduler.policy.types.Site`). A run placed there reads
that grid's signal and honours the site's power cap; everything else in the policy is unchanged.
"""

from __future__ import annotations

from scheduler.errors import PolicyError
from scheduler.policy.types import CarbonConfig, Policy, Site

__all__ = ["site_named", "policy_at_site"]


def site_named(policy: Policy, name: str) -> Site:
    """The site ``name`` of ``policy``; PolicyError naming the known sites when there is none."""
    for site in policy.sites:
        if site.name == name:
            return site
    known = ", ".join(s.name for s in policy.sites) or "none"
    raise PolicyError(f"site {name!r} is not in the policy (sites: {known})")


def policy_at_site(policy: Policy, name: str | None) -> Policy:
    """``policy`` with the site's carbon source (no fallbacks: they belong to another grid); unchanged for None."""
    if name is None:
        return policy
    site = site_named(policy, name)
    carbon = CarbonConfig(**site.carbon.model_dump(), max_staleness_s=policy.carbon.max_staleness_s,
                          forecast_horizon_s=policy.carbon.forecast_horizon_s)
    return policy.model_copy(update={"carbon": carbon})
