"""Replay a policy's recurring job over a real carbon trace: strategies side by side, against an exact oracle.

May import carbon, backends, plans and scheduler; never flows (the CLI in flows calls it).
"""

from simulation.simulate import STRATEGIES, JobOutcome, SimulationResult, resample, simulate

__all__ = ["STRATEGIES", "JobOutcome", "SimulationResult", "resample", "simulate"]
