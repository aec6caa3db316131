"""Settings for every tier run by pytest on this machine.

Hypothesis times its own input generation and each example: on a machine shared with emulators
and other runs (make test runs the VM tiers beside the service tier) both checks fail tests
that are right. Tests wait on conditions, never on time, so neither check is kept.
"""

from hypothesis import HealthCheck, settings

settings.register_profile("fingertip", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("fingertip")
