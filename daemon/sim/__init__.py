"""The simulated target: a phone or computer in software, for running the daemon without a board."""

from daemon.sim.target import SimTarget

__all__ = ["SimTarget"]
