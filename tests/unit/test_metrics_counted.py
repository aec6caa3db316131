"""The metrics count the backend through a view of it (daemon.metrics.Counted): the parts the
engine, the screen and the tools take are counted, the backend itself is left as it is."""

from __future__ import annotations

from daemon import config as cfg
from daemon.metrics import Counted, Metrics
from daemon.sim.backend import SimulatedBackend


async def test_counted_counts_and_leaves_the_backend_as_it_is() -> None:
    backend = SimulatedBackend(cfg.from_mapping({"backend": {"kind": "simulated"}}))
    parts = (backend.hid, backend.profiles, backend.frames)
    meter = Metrics("test", "ios", "simulated")
    counted = Counted(backend, meter)
    assert (backend.hid, backend.profiles, backend.frames) == parts  # nothing swapped
    assert counted.target is backend.target  # what else the backend offers, as it is
    await counted.start()
    try:
        await counted.hid.write("keyboard", bytes(8))
        await counted.frames.frame()
    finally:
        await counted.close()
    assert (
        meter.registry.get_sample_value("fingertip_hid_reports_written_total", {"role": "keyboard"})
        == 1
    )
    assert meter.registry.get_sample_value("fingertip_capture_frames_total") >= 1
