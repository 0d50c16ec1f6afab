import subprocess
import sys

import pytest

from numforge.allocator import retain_freed_memory


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mallopt is glibc's")
def test_glibc_accepts_the_thresholds():
    libc_is_glibc = subprocess.run(["ldd", "--version"], capture_output=True, text=True).stdout.lower()
    if "gnu" not in libc_is_glibc and "glibc" not in libc_is_glibc:
        pytest.skip("not glibc")
    assert retain_freed_memory() is True


def test_arrays_are_unaffected_after_retaining_freed_memory():
    np = pytest.importorskip("numpy")
    retain_freed_memory()
    a = np.arange(10_000_000, dtype=np.float32)  # 40 MB: above glibc's default mmap threshold
    del a
    b = np.ones(10_000_000, dtype=np.float32)  # may reuse the freed block: must hold its own values
    assert float(b.sum()) == 10_000_000.0
