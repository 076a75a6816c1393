"""`--otlp-endpoint`: each tick pushed to an OTLP/HTTP receiver, from a thread of its own.
The tick's thread encodes the tick (outputs/otlp/encode.py), gzips it and buffers it,
bounded by time (`--otlp-buffer`) and bytes, never waiting for the receiver; the sink's
thread sends the buffer oldest first (outputs/otlp/transport.py), retrying with backoff.
"""

from __future__ import annotations

import collections
import gzip
import os
import random
import threading
import time
from typing import TYPE_CHECKING, Callable, Deque, Iterable, List, NamedTuple, Optional, Sequence, Tuple

from cgstat.errors import CgstatError, require_regular
from cgstat.outputs.labelallow import LabelAllow
from cgstat.outputs.otlp.auth import gather, redact
from cgstat.outputs.otlp.budget import OtlpBudget
from cgstat.outputs.otlp.encode import Encoder, rejected
from cgstat.outputs.otlp.transport import Receiver
from cgstat.outputs.threaded import ThreadedSink
from cgstat.pipeline.sinks import NO_INFO, SinkError, TickInfo
from cgstat.text import escape_controls

if TYPE_CHECKING:  # the record types are for the type checker only
    from cgstat.contract.types import JsonObject

# The buffer is bounded by TIME (`--otlp-buffer`, 5 minutes by default) and, as a guard, by
# bytes; a tick leaves the buffer when the receiver took it. So a receiver that is down or
# slow loses nothing for the buffer's time: the ticks are kept and sent when it answers
# again, several ticks to a request when there is a backlog. Past the buffer's time the
# OLDEST ticks are dropped (the newest are what a dashboard wants next), said on stderr
# when the dropping begins and, with the count, when it ends.
# Failures are retried with exponential backoff (0.5 s doubling to 30 s, with jitter, or
# the receiver's Retry-After); a status that OTLP says not to retry (400: a body the
# receiver can't take) drops that request, said, and so are the points a receiver says it
# rejected in an answer of partial success. What the sink's thread has to say is said
# by the tick's thread at its next write (the diagnostics channel is used from one thread).
# close() sends what is buffered for up to `close_timeout_s` (after a stop signal, up to
# `stop_timeout_s`), then says how many ticks were not sent.
BUFFER_S = 300.0
MAX_BUFFER_BYTES = 256 * 1024 * 1024  # a guard: gzipped, 5 minutes of 1,000 cgroups a second is far less
BATCH_BYTES = 4 * 1024 * 1024  # a backlog is sent in requests of at most this many uncompressed bytes
BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 30.0
CLOSE_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 2.0


class OtlpOptions(NamedTuple):
    """The --otlp-* options."""

    endpoint: str
    encoding: str = "protobuf"
    headers: Tuple[Tuple[str, str], ...] = ()
    buffer_s: float = BUFFER_S
    timeout_s: float = 10.0
    compression: str = "gzip"
    ca_file: Optional[str] = None
    headers_file: Optional[str] = None  # and the environment's, a credential's: auth.py
    client_certificate: Optional[str] = None
    client_key: Optional[str] = None
    label_allow: Optional[str] = None  # which container labels become container.label.* (none by default)


class _Tick(NamedTuple):
    seq: int
    made: float  # monotonic time it was buffered
    body: bytes  # as sent alone (gzipped when compression is gzip)
    raw_size: int


class OtlpSink(ThreadedSink):
    """Pushes ticks to `options.endpoint` (see the module docstring and the comment above BUFFER_S)."""

    thread_name = "cgstat-otlp"

    def __init__(self, options: OtlpOptions, warn: Optional[Callable[[str, str], None]] = None,
                 receiver: Optional[Receiver] = None, max_bytes: int = MAX_BUFFER_BYTES,
                 close_timeout_s: float = CLOSE_TIMEOUT_S, stop_timeout_s: float = STOP_TIMEOUT_S,
                 clock: Callable[[], float] = time.monotonic, budget: Optional[OtlpBudget] = None):
        super().__init__()
        self.options = options
        self.warn = warn
        if budget is not None:  # folding is said once, as the sink says things: from the tick's thread
            budget.say = lambda message: self._warn("otlp-max-series", message)
        # CgstatError (what to install) without opentelemetry-proto
        self.encoder = Encoder(options.encoding, budget)
        if receiver is None:
            creds = gather(options.headers, options.headers_file, options.ca_file, options.client_certificate,
                           options.client_key, options.endpoint, os.environ)
            for n, note in enumerate(creds.notes):
                self._warn(f"otlp-secret-{n}", note)
            for what, path in zip(("CA file", "client certificate", "client key"), creds.tls):
                if path is not None:  # ssl would wait for ever on a FIFO's open
                    require_regular(path, f"OTLP {what} {escape_controls(path)}")
            try:
                receiver = Receiver(options.endpoint, creds.headers, options.timeout_s, *creds.tls)
            except (ValueError, OSError) as exc:  # a bad URL, an unreadable CA file or client certificate
                raise CgstatError(f"--otlp-endpoint: {exc}") from None
        self.receiver = receiver
        self.label_allow = LabelAllow(options.label_allow)
        self.shown = redact(options.endpoint)  # messages never show the URL's user info
        self.gzip = options.compression == "gzip"
        self.max_bytes = max_bytes
        self.close_timeout_s = close_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.clock = clock
        self._cond = threading.Condition()
        self._buffer: Deque[_Tick] = collections.deque()
        self._bytes = 0
        self._seq = 0
        self._closing = False
        # what happened, for the messages and the tests
        self.ticks_sent = 0
        self.requests_sent = 0
        self.ticks_dropped = 0  # the oldest, past the buffer's time or bytes
        self.ticks_refused = 0  # in requests the receiver refused for good
        self._episode_dropped = 0
        self._failing_since: Optional[float] = None

    # -- the tick's thread ---------------------------------------------------------------

    def open(self) -> None:
        self._start()

    def write(self, records: Iterable[JsonObject], tick: TickInfo = NO_INFO) -> None:
        """Encode the tick and buffer it; never waits for the receiver."""
        self._say()
        if self._thread is None:
            self.open()
        try:
            raw = self.encoder.encode(self.label_allow.apply(list(records)))
        except Exception as exc:  # a record the encoder can't take: that tick is not pushed, the run goes on
            raise SinkError(f"OTLP: a tick not encoded: {exc.__class__.__name__}: {exc}") from None
        body = gzip.compress(raw, compresslevel=1) if self.gzip else raw
        now = self.clock()
        with self._cond:
            self._seq += 1
            self._buffer.append(_Tick(self._seq, now, body, len(raw)))
            self._bytes += len(body)
            dropped = self._expire(now)
            self._cond.notify()
        if dropped and self._episode_dropped == dropped:
            self._warn("otlp-dropped", f"OTLP: {self.shown} took nothing for over "
                       f"{self.options.buffer_s:g} s: the oldest ticks are dropped from now on")
        self._say()

    def _expire(self, now: float) -> int:
        """Drop the ticks older than the buffer's time, or past its bytes (the oldest first)."""
        dropped = 0
        while self._buffer and (now - self._buffer[0].made > self.options.buffer_s
                                or (self._bytes > self.max_bytes and len(self._buffer) > 1)):
            self._bytes -= len(self._buffer.popleft().body)
            dropped += 1
        self.ticks_dropped += dropped
        self._episode_dropped += dropped
        return dropped

    def close(self) -> None:
        """Send what is buffered, for a while (see the comment above BUFFER_S); never raises."""
        thread = self._take_thread()
        if thread is not None:
            with self._cond:
                self._closing = True
                self._cond.notify_all()
            began = time.monotonic()  # real time, whatever clock the buffer's ages are read on
            while thread.is_alive():
                thread.join(0.1)
                waited = time.monotonic() - began
                if waited >= self.close_timeout_s or (self._stop_asked() and waited >= self.stop_timeout_s):
                    break
            with self._cond:
                left = len(self._buffer)
                self._buffer.clear()
                self._bytes = 0
                self._cond.notify_all()
            if left:
                self._tell("otlp-end", f"OTLP: {_ticks(left)} not sent at the end: "
                                  f"{self.shown} did not take them in time")
        self._say()
        self._end_episode()
        if thread is None or not thread.is_alive():  # else the sender still holds it; it ends on its own
            self.receiver.close()

    def _end_episode(self) -> None:
        if self._episode_dropped:
            self._warn("otlp-dropped-end", f"OTLP: {_ticks(self._episode_dropped)} dropped, the oldest, while "
                       f"{self.shown} took nothing for over {self.options.buffer_s:g} s "
                       f"({self.ticks_dropped} in all)")
            self._episode_dropped = 0

    def _heard(self, key: str) -> None:
        if key == "otlp-back":
            self._end_episode()

    # -- the sink's thread ---------------------------------------------------------------

    def _batch(self) -> Optional[List[_Tick]]:
        """The oldest ticks to send in one request (None: closing with nothing left)."""
        with self._cond:
            while not self._buffer:
                if self._closing:
                    return None
                self._cond.wait()
            batch = [self._buffer[0]]
            size = batch[0].raw_size
            for tick in list(self._buffer)[1:]:
                if size + tick.raw_size > BATCH_BYTES:
                    break
                batch.append(tick)
                size += tick.raw_size
            return batch

    def _body(self, batch: Sequence[_Tick]) -> bytes:
        if len(batch) == 1:
            return batch[0].body
        raws = [gzip.decompress(t.body) if self.gzip else t.body for t in batch]
        if self.options.encoding == "json":  # one resourceMetrics array of them all
            head = b'{"resourceMetrics":['
            raw = head + b",".join(r[len(head):-2] for r in raws if r != head + b"]}") + b"]}"
        else:  # serialised protobuf messages concatenated are one message, their repeated fields joined
            raw = b"".join(raws)
        return gzip.compress(raw, compresslevel=1) if self.gzip else raw

    def _done(self, batch: Sequence[_Tick]) -> None:
        """The batch left the buffer (sent, or refused): those of its ticks still there."""
        seqs = {t.seq for t in batch}
        with self._cond:
            while self._buffer and self._buffer[0].seq in seqs:
                self._bytes -= len(self._buffer.popleft().body)

    def _run(self) -> None:
        failures = 0
        while True:
            batch = self._batch()
            if batch is None:
                return
            try:
                outcome = self.receiver.post(self._body(batch), self.encoder.content_type, self.gzip)
            except Exception as exc:  # never a sender dead in silence
                outcome = None
                self._tell("otlp-error", f"OTLP: {exc.__class__.__name__}: {exc}")
            if outcome is not None and outcome.sent:
                self._done(batch)
                self.ticks_sent += len(batch)
                self.requests_sent += 1
                partly = rejected(self.options.encoding, outcome.answer)
                if partly:
                    self._tell("otlp-partial", f"OTLP: {self.shown} took the push but says {partly}")
                if self._failing_since is not None:
                    self._tell("otlp-back", f"OTLP: {self.shown} answers again, after "
                                       f"{self.clock() - self._failing_since:.0f} s: the buffered ticks are sent")
                    self._failing_since = None
                failures = 0
                continue
            if outcome is not None and not outcome.retry:
                self._done(batch)
                self.ticks_refused += len(batch)
                self._tell("otlp-refused", f"OTLP: {outcome.message}: {_ticks(len(batch))} refused, "
                                   "not retried")
                continue
            if self._failing_since is None:
                self._failing_since = self.clock()
                reason = outcome.message if outcome is not None else "the push failed"
                self._tell("otlp-retry", f"OTLP: {reason}; retrying, ticks kept for up to "
                                   f"{self.options.buffer_s:g} s")
            failures += 1
            delay = min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** min(failures - 1, 10)) * random.uniform(0.5, 1.0)
            if outcome is not None and outcome.retry_after_s is not None:
                delay = min(max(delay, outcome.retry_after_s), 60.0)
            with self._cond:
                self._cond.wait(delay)  # close() wakes it: one more try, then it gives up in time


def _ticks(n: int) -> str:
    return f"{n} tick" if n == 1 else f"{n} ticks"
