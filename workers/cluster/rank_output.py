"""A rank's own output (its stdout and stderr: a warning from torch, a
traceback, a print) kept for the job's log, bounded.

`OutputCapture.start()` points file descriptors 1 and 2 at pipes (so output
from C++ reaches it too, not only Python's); a reader thread per stream
writes every byte on to where the descriptor pointed before (Ray's worker
log files keep everything) and keeps the lines, each cut to `line_limit`
characters, in a buffer of at most `buffer_lines`: a rank that prints
faster than the driver takes (`take`) loses the oldest, and says how many.
Over an attempt at most `total_lines` are kept in all, then one line says
the rest was left out. Ray's own markers (`:actor_name:...`) are not output.
Making lines printable is the store's (every line of a job's log is).
"""

from __future__ import annotations

import os
import re
import threading
from collections import deque

LINE_LIMIT = 2000  # characters a line keeps
BUFFER_LINES = 1000  # lines waiting for the driver, per rank
TOTAL_LINES = 10_000  # lines a rank's attempt may add to the job's log
_RAY_MARKER = re.compile(r"^:[a-z_]+:")


class OutputCapture:
    def __init__(self, *, line_limit: int = LINE_LIMIT, buffer_lines: int = BUFFER_LINES,
                 total_lines: int = TOTAL_LINES, fds: tuple[int, ...] = (1, 2)):
        self.line_limit, self.total_lines, self.fds = line_limit, total_lines, fds
        self._lines: deque[str] = deque(maxlen=buffer_lines)
        self._lock = threading.Lock()
        self._dropped = 0  # lines the buffer lost since the last take
        self._kept = 0  # lines kept so far
        self._started = False

    def start(self) -> OutputCapture:
        """Capture from now on (once; a second call does nothing)."""
        if self._started:
            return self
        self._started = True
        for fd in self.fds:
            original = os.dup(fd)
            read_end, write_end = os.pipe()
            os.dup2(write_end, fd)
            os.close(write_end)
            threading.Thread(target=self._pump, args=(read_end, original), daemon=True,
                             name=f"rank-output-{fd}").start()
        return self

    def take(self) -> list[str]:
        """The lines kept since the last take, oldest first (a line first
        saying how many were lost, if the buffer overflowed)."""
        with self._lock:
            lines, dropped = list(self._lines), self._dropped
            self._lines.clear()
            self._dropped = 0
        if dropped:
            lines.insert(0, f"[{dropped} lines of output dropped: printed faster than read]")
        return lines

    def keep(self, line: str) -> None:
        """Keep one line (what the reader threads call)."""
        if _RAY_MARKER.match(line) or not line.strip():
            return
        with self._lock:
            if self._kept > self.total_lines:
                return
            self._kept += 1
            if self._kept > self.total_lines:
                line = f"[output past {self.total_lines} lines is not kept in the job's log]"
            elif len(line) > self.line_limit:
                line = f"{line[:self.line_limit]}...[{len(line) - self.line_limit} more chars]"
            if len(self._lines) == self._lines.maxlen:
                self._dropped += 1
            self._lines.append(line)

    def _pump(self, read_end: int, original: int) -> None:
        pending = b""
        while chunk := os.read(read_end, 65536):
            view = memoryview(chunk)
            while view:  # on to where the stream went before (Ray's log file)
                view = view[os.write(original, view):]
            pending += chunk
            *complete, pending = pending.split(b"\n")
            if len(pending) > 4 * self.line_limit:  # one endless line: keep its start
                complete.append(pending)
                pending = b""
            for raw in complete:
                self.keep(raw.decode("utf-8", "replace").rstrip("\r"))
