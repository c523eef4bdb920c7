"""A node incarnation's metrics file (`gossipd run --metrics`, JSON lines), read as it is written,
and the helpers that read its lines: the wall time of a line and a logged row of W."""

import json


# ---------------------------------------------------------------- metrics files

class MetricsFile:
    """Reads one node incarnation's JSON lines as they are written (a partial last line waits)."""

    def __init__(self, path, node, incarnation):
        self.path, self.node, self.incarnation = path, node, incarnation
        self.offset, self.partial = 0, b""
        self.lines = []
        self.iteration = -1  # latest completed iteration seen in an "iter" line
        self.bad = []

    def poll(self):
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return
        self.offset += len(data)
        data = self.partial + data
        parts = data.split(b"\n")
        self.partial = parts.pop()
        for raw in parts:
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
            except ValueError:
                self.bad.append(raw[:200])
                continue
            self.lines.append(obj)
            if obj.get("type") == "iter":
                self.iteration = max(self.iteration, int(obj.get("iteration", -1)))

    def of_type(self, t):
        return [o for o in self.lines if o.get("type") == t]

    def events(self, name):
        return [o for o in self.lines if o.get("type") == "event" and o.get("event") == name]


def line_ms(obj):
    v = obj.get("unix_ms", obj.get("wall_ms"))
    return None if v is None else int(v)


def parse_row(text):
    row = {}
    for item in text.split(","):
        if not item:
            continue
        j, w = item.split(":")
        row[int(j)] = float(w)
    return row
