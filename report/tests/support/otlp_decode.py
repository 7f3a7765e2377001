"""Decodes a pyperf `--otlp` file with OpenTelemetry's own Python classes (the `opentelemetry-proto` package from
PyPI: an implementation independent of the Rust crate pyperf encodes with) and prints what report/tests/otlp.rs
checks, as JSON: per resource its attributes and, per profile, the sample and period types, the period, the times,
and each sample's stack (root first, frames named as `pyperf report --folded` names them) with its value and
attributes. Every index into the dictionary is checked on the way; a bad one is an error (exit 1)."""
import json
import sys

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.profiles.v1development.profiles_service_pb2 import ExportProfilesServiceRequest


def summarize(data):
    """The JSON-able summary of an encoded request (AssertionError or DecodeError when it is not a valid one)."""
    req = ExportProfilesServiceRequest()
    req.ParseFromString(data)
    d = req.dictionary
    strings = list(d.string_table)
    assert strings and strings[0] == "", "string_table[0] must be empty"
    for table in ("mapping_table", "location_table", "function_table", "link_table", "attribute_table", "stack_table"):
        rows = getattr(d, table)
        assert len(rows) >= 1 and rows[0].ByteSize() == 0, f"{table}[0] must be the zero value"

    def s(i):
        assert 0 <= i < len(strings), f"string index {i} of {len(strings)}"
        return strings[i]

    def attr(i):
        assert 0 < i < len(d.attribute_table), f"attribute index {i}"
        kv = d.attribute_table[i]
        v = kv.value
        return s(kv.key_strindex), (v.string_value if v.HasField("string_value") else v.int_value)

    def frame(loc_index):
        assert 0 < loc_index < len(d.location_table), f"location index {loc_index}"
        loc = d.location_table[loc_index]
        assert 0 <= loc.mapping_index < len(d.mapping_table)
        assert len(loc.lines) == 1, "one line per location"
        line = loc.lines[0]
        assert 0 < line.function_index < len(d.function_table)
        f = d.function_table[line.function_index]
        name, file = s(f.name_strindex), s(f.filename_strindex)
        if not file:
            return name
        kind = dict(attr(i) for i in loc.attribute_indices).get("profile.frame.type")
        if kind == "kernel":
            return f"{name}_[k]"
        if kind == "native":
            return f"{name} ({file.rsplit('/', 1)[-1]})"
        assert kind == "cpython", f"frame type {kind!r} of {name}"
        return f"{name} ({file}:{line.line})" if line.line else f"{name} ({file})"

    out = {"resources": []}
    for rp in req.resource_profiles:
        res = {"attributes": {}, "profiles": [], "scope": None}
        for kv in rp.resource.attributes:
            v = kv.value
            res["attributes"][kv.key] = v.string_value if v.HasField("string_value") else v.int_value
        for sp in rp.scope_profiles:
            res["scope"] = [sp.scope.name, sp.scope.version]
            for p in sp.profiles:
                prof = {
                    "sample_type": [s(p.sample_type.type_strindex), s(p.sample_type.unit_strindex)],
                    "period_type": [s(p.period_type.type_strindex), s(p.period_type.unit_strindex)],
                    "period": p.period,
                    "time_unix_nano": p.time_unix_nano,
                    "duration_nano": p.duration_nano,
                    "samples": [],
                }
                for smp in p.samples:
                    assert 0 < smp.stack_index < len(d.stack_table), f"stack index {smp.stack_index}"
                    leaf_first = [frame(i) for i in d.stack_table[smp.stack_index].location_indices]
                    assert len(smp.values) == 1, "one value per sample"
                    entry = {
                        "stack": list(reversed(leaf_first)),
                        "value": smp.values[0],
                        "attributes": dict(attr(i) for i in smp.attribute_indices),
                    }
                    if smp.link_index:
                        assert 0 < smp.link_index < len(d.link_table), f"link index {smp.link_index}"
                        link = d.link_table[smp.link_index]
                        assert len(link.trace_id) == 16 and len(link.span_id) == 8, "link id lengths"
                        entry["link"] = [link.trace_id.hex(), link.span_id.hex()]
                    prof["samples"].append(entry)
                res["profiles"].append(prof)
        out["resources"].append(res)
    return out


def main(path):
    try:
        out = summarize(open(path, "rb").read())
    except DecodeError as e:
        sys.exit(f"undecodable: {e}")
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1])
