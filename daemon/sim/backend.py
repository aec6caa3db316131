"""The simulated backend: the simulated target plays HID output, profiles and frames at once."""

from __future__ import annotations

from collections.abc import AsyncGenerator

from daemon.backends import HidOutput, ProfileControl
from daemon.config import Config
from daemon.frames import FrameSource
from daemon.sim.target import SimTarget
from daemon.usb import UsbLink


class SimulatedBackend:
    """The simulated target plays all three backends (daemon.sim)."""

    def __init__(self, config: Config):
        b = config.backend
        self.target = SimTarget(
            config.platform,
            width=b.sim_width or None,
            height=b.sim_height or None,
            reenumerate_s=b.sim_reenumerate_s,
            xkb_names=config.device.layout.xkb,
            hdmi=b.sim_hdmi,
            overscan=b.sim_overscan,
        )
        self.hid: HidOutput = self.target
        self.profiles: ProfileControl = self.target
        self.frames: FrameSource = self.target
        self.link = UsbLink(
            can_wake=True,
            wake_reason="the simulated target answers remote wakeup when its host enabled it",
            wakeup=self.target.remote_wakeup,
            state=self.target.usb_state,
        )
        self.target.on_usb_state = self.link.set

    async def start(self) -> bool:
        return False  # the simulated target is born with the daemon: it holds nothing

    async def follow_link(self) -> AsyncGenerator[None, None]:
        yield  # the simulated target reports each of its state changes itself (on_usb_state)

    async def close(self) -> None:
        return None
