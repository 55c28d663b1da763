"""The storage node's clock: what it stamps on the commands it proposes.

A group's clock is the largest time any of its commands carried (it never
goes back), and timed messages are released once it reaches their delivery
time. So one leader whose wall clock steps ahead (a mis-set clock, an NTP
step, the chaos suite's ``clock-jump``) would push the group's clock ahead
and release every timer due within the step early, and the group's clock
would stay ahead until real time caught up.

:class:`NodeClock` keeps the node's time on the monotonic clock instead and
only steers it toward the wall clock at a bounded rate (``SLEW_PPM``, as
ntpd slews), so a wall-clock step moves what the node stamps by at most
``SLEW_PPM`` per million ms elapsed. It also follows the raft-committed
time: a group clock the node applied (stamped by another leader) that is
ahead of its own pulls it forward at once, so a node whose wall clock was
behind or that restarted stamps the time its groups already reached.

Invariants: :meth:`NodeClock.read` never goes back; between two reads it
advances by the monotonic time elapsed, plus or minus ``SLEW_PPM`` of it,
unless :meth:`NodeClock.observe` raised it to a committed time.

PURE: the wall and monotonic readings come in as arguments.
"""

from __future__ import annotations

SLEW_PPM = 500
"""The most the node's time may run faster or slower than the monotonic clock to
close its gap to the wall clock, in parts per million (ntpd's maximum slew)."""


class NodeClock:
    """The node's time in ms: monotonic, steered toward the wall clock, at least the
    committed time of its groups."""

    def __init__(self) -> None:
        self._time_ms: float | None = None  # the time at the last read
        self._monotonic_ms = 0.0  # the monotonic reading at the last read
        self._committed_ms = 0  # the largest committed time observed before the first read

    def read(self, wall_ms: float, monotonic_ms: float) -> int:
        """The node's time now, given the wall and monotonic clocks' readings.

        The first read takes the wall clock (or a larger committed time
        observed before it); pass the wall reading with its fraction of a ms, or
        the node's time lags the wall clock by up to 1 ms from the start; later reads advance by the
        monotonic time elapsed, corrected toward ``wall_ms`` by at most
        ``SLEW_PPM`` of it.
        """
        if self._time_ms is None:
            self._time_ms = float(max(wall_ms, self._committed_ms))
            self._monotonic_ms = monotonic_ms
            return int(self._time_ms)
        elapsed_ms = max(0.0, monotonic_ms - self._monotonic_ms)
        free_ms = self._time_ms + elapsed_ms
        slew_ms = elapsed_ms * SLEW_PPM / 1_000_000
        steered_ms = free_ms + min(slew_ms, max(-slew_ms, wall_ms - free_ms))
        self._time_ms = max(self._time_ms, steered_ms)
        self._monotonic_ms = max(self._monotonic_ms, monotonic_ms)
        return int(self._time_ms)

    def observe(self, committed_ms: int, wall_ms: float, monotonic_ms: float) -> int:
        """A group this node hosts committed time ``committed_ms`` (readings as for
        :meth:`read`, taken now): never stamp less. Returns the node's time now.

        The node's time is brought to now first, so a committed time stamped
        since the last read is not counted twice.
        """
        if self._time_ms is None:
            self._committed_ms = max(self._committed_ms, committed_ms)
            return self.read(wall_ms, monotonic_ms)
        now_ms = self.read(wall_ms, monotonic_ms)
        if committed_ms > now_ms:
            self._time_ms = float(committed_ms)
            return committed_ms
        return now_ms
