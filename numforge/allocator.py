"""Keep freed memory for reuse: fewer page faults in a training loop (glibc only).

A training step allocates and frees the same large temporaries every step
(activations, gradients, attention tiles). glibc's malloc serves a block
above its mmap threshold (dynamic, at most 32 MiB on 64-bit) with a fresh
``mmap`` and returns it to the kernel on ``free``; blocks at the top of the
heap are trimmed back too. Each step then touches brand-new pages, and every
page costs a fault (figures in ops/WHY_FAST.md).

``retain_freed_memory()`` raises both thresholds so freed blocks stay in the
heap and the next step reuses them.
The process keeps its peak footprint instead of shrinking between steps,
which is what a training process wants. It changes nothing but where malloc
finds memory; results are bit-identical. The ``numforge`` command calls it
at start; library users may call it themselves.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

_M_TRIM_THRESHOLD = -1  # mallopt parameter numbers from glibc's malloc.h
_M_MMAP_THRESHOLD = -3
_KEEP_BYTES = 2**30  # blocks up to 1 GiB come from the heap and stay there when freed


def retain_freed_memory() -> bool:
    """Ask glibc to keep freed blocks for reuse; True if it accepted, False elsewhere (macOS, musl, Windows)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, _KEEP_BYTES)) and bool(mallopt(_M_TRIM_THRESHOLD, _KEEP_BYTES))
