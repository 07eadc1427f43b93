"""Replay a policy's recurring job over a real carbon trace: strategies side by side, against an exact oracle.

May import carbon, backends, plans and scheduler; never flows (the CLI in flows calls it).
"""

from simulation.simulate import JobOutcome, ModeModel, SimulationResult, model_from_backend, model_from_profile, resample, simulate

__all__ = ["JobOutcome", "ModeModel", "SimulationResult", "model_from_backend", "model_from_profile", "resample", "simulate"]
