"""deploy/deploy.py's parts (`make deploy`, `make undeploy`), along the steps it takes:

- pure: what deploy decides from what the board and the daemon said (no I/O);
- ssh: the one connection to the board that every step goes through;
- health: the daemon's health check through that connection;
- build: the fingertip wheel, the board's wheelhouse and its packages, built here;
- deploy.py: the two commands (the script `make deploy` runs).

Only the standard library (and daemon.memory and daemon.known_boards, stdlib too): it runs
with the clone's venv but needs nothing from it but pip.
"""

from __future__ import annotations

from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]


class DeployError(Exception):
    """One clear line for the user; the step that failed is printed before it."""
