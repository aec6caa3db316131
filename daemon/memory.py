"""The board's memory: what it has (and so whether OCR runs), and the C allocator set for a
small board, for the daemon and its OCR worker. Stdlib only: `make deploy` reads it too.

Python's objects live in its own small-object arenas; everything big (frames, JPEG buffers,
the OCR engine's activations) goes to glibc's malloc. Left to its defaults, glibc serves a
large block from a heap after the first large one was freed (its mmap threshold rises to the
size of what was freed, up to 32 MB), and a heap that blocks of many sizes pass through, from
several threads, fragments: memory that is free but never given back.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
from typing import Any

# OCR's `enabled = "auto"` turns it on where the board has at least this much RAM: a 512 MB
# board shows ~430-480 MB in MemTotal (the firmware and kernel keep the rest), a 256 MB one
# ~200 MB. The daemon decides with it at start, and `make deploy` to install OCR's packages.
AUTO_MIN_MEMORY_MB = 400
M_MMAP_THRESHOLD = -3  # mallopt()'s parameter number (malloc.h)
MMAP_THRESHOLD = 1 << 20


@functools.cache
def _libc() -> Any:
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


def map_large_blocks() -> None:
    """Serve every allocation of 1 MiB or more with a mapping of its own, returned to the
    system the moment it is freed; call it before the first large allocation. Why: with the
    moving threshold, the daemon with the simulated target held 210 MB after a few taps with
    their evidence (two 6 MB frames each, rendered, compared and encoded in worker threads)
    against 105 MB with the fixed one, and the OCR worker's three-frame read peaked 80 MB
    higher. The cost, fresh pages for each large block, was within the noise of a frame's
    time (bench_memory.py, bench_ocr.py). A no-op without glibc."""
    mallopt = getattr(_libc(), "mallopt", None)
    if mallopt is not None:
        mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)


def give_back_memory() -> None:
    """Return freed heap memory to the system (malloc_trim). Why: the OCR worker's small blocks
    of a read (text crops, boxes) stay in its heap otherwise. A no-op without glibc."""
    trim = getattr(_libc(), "malloc_trim", None)
    if trim is not None:
        trim(0)


def ocr_enabled(setting: bool | str, total_mb: int) -> bool:
    """Whether OCR is on: as set, or with "auto" where the board has the memory for it."""
    if setting == "auto":
        return total_mb >= AUTO_MIN_MEMORY_MB
    return bool(setting)


def board_memory_mb() -> int:
    """The board's RAM as the kernel counts it (MemTotal), from sysinfo(2): the daemon's
    sandbox (ProcSubset=pid) hides /proc/meminfo."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2**20
    except (ValueError, OSError):
        return 0
