"""etc/fingertip.toml says "the values below are the defaults": it must stay so as code changes."""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

from daemon.config import Config, from_mapping

BOARD_FILE = Path(__file__).resolve().parents[2] / "etc" / "fingertip.toml"


def test_the_board_config_file_states_the_code_defaults() -> None:
    loaded = from_mapping(tomllib.loads(BOARD_FILE.read_text()), "etc/fingertip.toml")
    # The one deliberate difference: on a board the daemon listens on the USB link too.
    assert loaded.server.listen == ["127.0.0.1", "192.168.42.1"]
    server = dataclasses.replace(loaded.server, listen=Config().server.listen)
    assert dataclasses.replace(loaded, server=server, source=Config().source) == Config()
