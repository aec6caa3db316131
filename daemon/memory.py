"""The C allocator, set for a small board: used by the daemon and by its OCR worker.

Python's objects live in its own small-object arenas; everything big (frames, JPEG buffers,
the OCR engine's activations) goes to glibc's malloc. Left to its defaults, glibc serves a
large block from a heap after the first large one was freed (its mmap threshold rises to the
size of what was freed, up to 32 MB), and a heap that blocks of many sizes pass through, from
several threads, fragments: memory that is free but never given back. Stdlib only.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from typing import Any

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
