"""A loopback receiver of `pyperf record --push` for tests/push.rs, written apart from pyperf's Rust encoders: it
decodes each request with Python's protobuf runtime, as the real servers decode them, and checks what they check.

- OTLP (`POST /v1development/profiles`): gzip'd `ExportProfilesServiceRequest`, decoded with OpenTelemetry's own
  classes (the `opentelemetry-proto` package from PyPI) and summarized by report/tests/support/otlp_decode.py, which
  checks every dictionary index.
- Pyroscope's Connect API (`POST /push.v1.PusherService/Push`, `application/proto`): a `push.v1.PushRequest`.
- Parca's WriteRaw as gRPC-Web (`application/grpc-web+proto`): one length-prefixed `WriteRawRequest`, checked as
  Parca's normalizer and pprof validator do (pkg/normalizer: a `__name__` label, Prometheus label names, no name
  twice, a gzip'd pprof whose ids are sequential and whose indices are in range); answered with a data frame and a
  trailer frame, as grpc-web's Go wrapper answers.

The push and Parca messages are described here (field numbers as in Pyroscope's api/push/v1/push.proto and Parca's
profilestore.proto), and so is google/pprof's profile.proto, through descriptor_pb2: no protoc needed.

Usage: push_receiver.py MODE, MODE one of `answer`, `status:CODE` (every request answered CODE), `close` (every
connection closed unanswered), `hang` (never answered), `partial` (OTLP: a partial success rejecting one profile).
Prints `port N` once listening, then one JSON line per request it took (or refused: `"error"`).
"""
import base64
import gzip
import json
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

sys.path.insert(0, __file__.rsplit("/", 3)[0] + "/report/tests/support")
import otlp_decode  # noqa: E402
from opentelemetry.proto.collector.profiles.v1development.profiles_service_pb2 import (  # noqa: E402
    ExportProfilesServiceResponse,
)

F = descriptor_pb2.FieldDescriptorProto
KINDS = {"string": F.TYPE_STRING, "bytes": F.TYPE_BYTES, "bool": F.TYPE_BOOL, "int64": F.TYPE_INT64,
         "uint64": F.TYPE_UINT64, "uint32": F.TYPE_UINT32}


def messages(package, spec):
    """Message classes of `package` from {name: [(field, number, type or .Message, repeated)]}."""
    f = descriptor_pb2.FileDescriptorProto(name=package + ".proto", package=package, syntax="proto3")
    for name, fields in spec.items():
        m = f.message_type.add(name=name)
        for field, number, kind, repeated in fields:
            d = m.field.add(name=field, number=number,
                            label=F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL)
            if kind in KINDS:
                d.type = KINDS[kind]
            else:
                d.type, d.type_name = F.TYPE_MESSAGE, f".{package}.{kind}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.{name}")) for name in spec}


PPROF = messages("perftools.profiles", {
    "Profile": [("sample_type", 1, "ValueType", True), ("sample", 2, "Sample", True), ("mapping", 3, "Mapping", True),
                ("location", 4, "Location", True), ("function", 5, "Function", True),
                ("string_table", 6, "string", True), ("time_nanos", 9, "int64", False),
                ("duration_nanos", 10, "int64", False), ("period_type", 11, "ValueType", False),
                ("period", 12, "int64", False), ("default_sample_type", 14, "int64", False)],
    "ValueType": [("type", 1, "int64", False), ("unit", 2, "int64", False)],
    "Sample": [("location_id", 1, "uint64", True), ("value", 2, "int64", True), ("label", 3, "Label", True)],
    "Label": [("key", 1, "int64", False), ("str", 2, "int64", False), ("num", 3, "int64", False)],
    "Mapping": [("id", 1, "uint64", False), ("filename", 5, "int64", False), ("build_id", 6, "int64", False)],
    "Location": [("id", 1, "uint64", False), ("mapping_id", 2, "uint64", False), ("line", 4, "Line", True)],
    "Line": [("function_id", 1, "uint64", False), ("line", 2, "int64", False)],
    "Function": [("id", 1, "uint64", False), ("name", 2, "int64", False), ("system_name", 3, "int64", False),
                 ("filename", 4, "int64", False)],
})["Profile"]
PUSH = messages("push.v1", {
    "PushRequest": [("series", 1, "RawProfileSeries", True)],
    "RawProfileSeries": [("labels", 1, "LabelPair", True), ("samples", 2, "RawSample", True)],
    "LabelPair": [("name", 1, "string", False), ("value", 2, "string", False)],
    "RawSample": [("raw_profile", 1, "bytes", False), ("ID", 2, "string", False)],
})
PARCA = messages("parca.profilestore.v1alpha1", {
    "WriteRawRequest": [("tenant", 1, "string", False), ("series", 2, "RawProfileSeries", True),
                        ("normalized", 3, "bool", False)],
    "RawProfileSeries": [("labels", 1, "LabelSet", False), ("samples", 2, "RawSample", True)],
    "LabelSet": [("labels", 1, "Label", True)],
    "Label": [("name", 1, "string", False), ("value", 2, "string", False)],
    "RawSample": [("raw_profile", 1, "bytes", False)],
})
LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def pprof(raw):
    """A pushed pprof, checked as Parca's ValidatePprofProfile checks it, and summarized: sample types, the default
    one, each type's total, and each sample's stack (function names, root first) with its values and labels."""
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    p = PPROF()
    p.ParseFromString(raw)
    st = list(p.string_table)
    assert not st or st[0] == "", "first string must be empty"
    for table in ("mapping", "function", "location"):
        for i, row in enumerate(getattr(p, table)):
            assert row.id == i + 1, f"{table} id is not sequential"
    for m in p.mapping:
        assert m.filename < len(st) and m.build_id < len(st)
    for f in p.function:
        assert f.name < len(st) and f.system_name < len(st) and f.filename < len(st)
    names = {}
    for loc in p.location:
        assert loc.mapping_id <= len(p.mapping), "location has invalid mapping id"
        assert all(0 < ln.function_id <= len(p.function) for ln in loc.line)
        names[loc.id] = st[p.function[loc.line[0].function_id - 1].name]
    assert p.sample_type or not p.sample, "missing sample type information"
    types = [[st[t.type], st[t.unit]] for t in p.sample_type]
    totals = [0] * len(types)
    stacks = []
    for smp in p.sample:
        assert len(smp.value) == len(types)
        for i, v in enumerate(smp.value):
            totals[i] += v
        labels = {st[lb.key]: (st[lb.str] if lb.str else lb.num) for lb in smp.label}
        stacks.append({"stack": [names[i] for i in reversed(smp.location_id)], "values": list(smp.value),
                       "labels": labels})
    return {"types": types, "default": st[p.default_sample_type], "totals": totals, "period": p.period,
            "time_nanos": p.time_nanos, "duration_nanos": p.duration_nanos, "samples": stacks,
            "gz": base64.b64encode(gzip.compress(raw)).decode()}


def labels_checked(pairs):
    """Parca's NormalizeWriteRawRequest: a __name__, Prometheus label names, each once."""
    seen = {}
    for name, value in pairs:
        assert name == "__name__" or LABEL_NAME.match(name), f"invalid label name: {name}"
        assert name not in seen, f"duplicate label name: {name}"
        seen[name] = value
    assert seen.get("__name__"), "missing __name__ label"
    return seen


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    mode = "answer"

    def log_message(self, *args):
        pass

    def emit(self, record):
        record.update(path=self.path, tenant=self.headers.get("X-Scope-OrgID"),
                      content_type=self.headers.get("Content-Type"), received=time.time())
        with LOCK:
            print(json.dumps(record), flush=True)

    def reply(self, code, body=b"", headers=()):
        self.send_response(code)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        mode = Handler.mode
        if mode == "close":
            self.close_connection = True
            self.connection.close()
            self.emit({"error": "closed unanswered"})
            return
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if mode == "hang":
            self.emit({"error": "held"})
            time.sleep(3600)
            return
        if mode.startswith("status:"):
            self.emit({"error": mode})
            self.reply(int(mode[7:]), b"overloaded")
            return
        try:
            if self.path.endswith("/v1development/profiles"):
                assert self.headers.get("Content-Type") == "application/x-protobuf", "content type"
                assert self.headers.get("Content-Encoding") == "gzip", "not gzip'd"
                record = {"protocol": "otlp", "request": otlp_decode.summarize(gzip.decompress(body))}
                answer = ExportProfilesServiceResponse()
                if mode == "partial":
                    answer.partial_success.rejected_profiles = 1
                    answer.partial_success.error_message = "one profile too old"
                self.emit(record)
                self.reply(200, answer.SerializeToString(), [("Content-Type", "application/x-protobuf")])
            elif self.path.endswith("/push.v1.PusherService/Push"):
                assert self.headers.get("Content-Type") == "application/proto", "content type"
                req = PUSH["PushRequest"]()
                req.ParseFromString(body)
                series = [{"labels": labels_checked((lb.name, lb.value) for lb in s.labels),
                           "samples": [{"id": x.ID, "profile": pprof(x.raw_profile)} for x in s.samples]}
                          for s in req.series]
                self.emit({"protocol": "connect", "series": series})
                self.reply(200, b"", [("Content-Type", "application/proto")])
            elif self.path.endswith("/parca.profilestore.v1alpha1.ProfileStoreService/WriteRaw"):
                assert self.headers.get("Content-Type", "").startswith("application/grpc-web"), "content type"
                assert body[0] == 0 and int.from_bytes(body[1:5], "big") == len(body) - 5, "one uncompressed frame"
                req = PARCA["WriteRawRequest"]()
                req.ParseFromString(body[5:])
                series = [{"labels": labels_checked((lb.name, lb.value) for lb in s.labels.labels),
                           "samples": [{"profile": pprof(x.raw_profile)} for x in s.samples]}
                          for s in req.series]
                self.emit({"protocol": "parca", "normalized": req.normalized, "series": series})
                trailer = b"grpc-status:0\r\ngrpc-message:\r\n"
                frames = b"\x00\x00\x00\x00\x00" + b"\x80" + len(trailer).to_bytes(4, "big") + trailer
                self.reply(200, frames, [("Content-Type", "application/grpc-web+proto")])
            else:
                self.emit({"error": f"unknown path {self.path}"})
                self.reply(404)
        except Exception as e:  # noqa: BLE001 - any failure to decode is the test's finding
            self.emit({"error": f"{type(e).__name__}: {e}"})
            if "grpc-web" in self.headers.get("Content-Type", ""):
                msg = str(e).replace(" ", "%20")
                self.reply(200, b"", [("Content-Type", "application/grpc-web+proto"), ("grpc-status", "3"),
                                      ("grpc-message", msg)])
            else:
                self.reply(400, str(e).encode())


LOCK = threading.Lock()

if __name__ == "__main__":
    Handler.mode = sys.argv[1]
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(f"port {server.server_address[1]}", flush=True)
    server.serve_forever()
