"""A sink from outside the package, as a plug-in is written (docs/sinks.md): every record's
JSON line appended to --tap FILE, taken as the records pass (the line cgstat made once)."""

from cgstat.pipeline.sinks import Sink, SinkKind, SinkOption, register

class TapSink(Sink):
    streams = True
    tees = True
    wants_lines = True

    def __init__(self, path):
        self.path = path
        self.line_of = None

    def open(self):
        self.f = open(self.path, "ab")

    def share_lines(self, line_of):
        self.line_of = line_of

    def tee(self, records):
        for r in records:
            self.f.write(self.line_of(r) + b"\n")
            yield r

    def end_tee(self, tick):
        self.f.flush()

    def close(self):
        self.f.close()

register(SinkKind("tap", (SinkOption("--tap", "Append every record to FILE.", metavar="FILE"),),
                  lambda given, context: TapSink(given["tap"])))
