"""The role processes' malloc settings (rip5.shell.tune_malloc).

Each case runs in a fresh interpreter: malloc settings are process-wide and
cannot be undone. The machines rip5 runs on have glibc (tune_malloc is
a no-op elsewhere, and this test would fail there).
"""

from __future__ import annotations

import os
import subprocess
import sys

# Receives 40 frames of 300 KB in 64 KiB reads (how a raft batch arrives) and
# prints the minor page faults that took.
_RECEIVE_FRAMES = """
import resource, sys
from angelia_rpc.framing import FrameDecoder, encode_frame
if sys.argv[1] == "tuned":
    from rip5.shell import tune_malloc
    assert tune_malloc()
frame = encode_frame(3, 7, b"\\x01" * 300_000, frame_bytes_max=16 << 20)
stream = frame * 40
decoder = FrameDecoder(16 << 20)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
frames = 0
for i in range(0, len(stream), 65536):
    frames += len(decoder.feed(stream[i : i + 65536]))
assert frames == 40
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


# Both runs start from glibc's documented default mmap threshold (128 KiB). Left
# alone, glibc raises it the first time a process frees a block it had mapped,
# so an untuned baseline would depend on what the interpreter's imports freed
# first (a newer grpcio wheel raised it before the frames arrived). Only
# tune_malloc differs between the two runs: it sets the threshold itself.
_GLIBC_DEFAULTS = {"MALLOC_MMAP_THRESHOLD_": "131072"}
_FRAME_PAGES = 40 * 300_000 // 4096  # the pages the 40 frames span


def _page_faults(mode: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", _RECEIVE_FRAMES, mode],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={**os.environ, **_GLIBC_DEFAULTS},
    )
    return int(done.stdout)


def test_freed_blocks_are_reused_instead_of_faulted_in_again() -> None:
    # Untuned, every 300 KB block goes back to the kernel when freed and the
    # next one is faulted in (and zeroed) page by page: ~6,200 faults here.
    plain = _page_faults("plain")
    tuned = _page_faults("tuned")
    assert plain > _FRAME_PAGES, (plain, _FRAME_PAGES)
    assert tuned * 10 < plain, (plain, tuned)
    assert tuned * 10 < _FRAME_PAGES, (tuned, _FRAME_PAGES)
