#!/usr/bin/python3
"""Every request strata's Firecracker client sends, against Firecracker's API.

Runs fc_record (argv[1]), which drives the client against a recording unix
socket server, then checks each recorded request: its method and path are an
operation of firecracker-api-subset.json (the vendored subset of upstream's
swagger document, see README.md) and its body matches the operation's schema:
required fields present, types right, enums and bounds kept, no property the
schema does not name. Also checks that every operation the backend needs was
sent, and that the validator itself rejects bad bodies. Standard library only.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SPEC = json.load(open(os.path.join(HERE, "firecracker-api-subset.json")))
DEFS = SPEC["definitions"]
NEEDED = {("PUT", "/machine-config"), ("PUT", "/boot-source"), ("PUT", "/drives/{drive_id}"),
          ("PUT", "/vsock"), ("PUT", "/actions"), ("PATCH", "/vm"),
          ("PUT", "/snapshot/create"), ("PUT", "/snapshot/load")}


def check(value, schema, where):
    """Returns a list of problems of value against schema."""
    if "$ref" in schema:
        return check(value, DEFS[schema["$ref"]], where)
    t = schema.get("type")
    errs = []
    ok = {
        "object": lambda v: isinstance(v, dict),
        "string": lambda v: isinstance(v, str),
        "boolean": lambda v: isinstance(v, bool),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "array": lambda v: isinstance(v, list),
    }
    if t and not ok[t](value):
        return ["%s: %r is not %s" % (where, value, t)]
    if "enum" in schema and value not in schema["enum"]:
        errs.append("%s: %r not in %s" % (where, value, schema["enum"]))
    if "minimum" in schema and value < schema["minimum"]:
        errs.append("%s: %r < minimum %s" % (where, value, schema["minimum"]))
    if "maximum" in schema and value > schema["maximum"]:
        errs.append("%s: %r > maximum %s" % (where, value, schema["maximum"]))
    if t == "object":
        props = schema.get("properties", {})
        for k in schema.get("required", []):
            if k not in value:
                errs.append("%s: required %r missing" % (where, k))
        for k, v in value.items():
            if k not in props:
                errs.append("%s: unknown property %r" % (where, k))
            else:
                errs += check(v, props[k], where + "." + k)
    if t == "array":
        for i, v in enumerate(value):
            errs += check(v, schema.get("items", {}), "%s[%d]" % (where, i))
    return errs


def operation(method, path):
    """The (template, definition) of an API path, or None."""
    for tmpl, ops in SPEC["paths"].items():
        rx = "^" + re.sub(r"\{[a-z_]+\}", "[^/]+", tmpl) + "$"
        if re.match(rx, path) and method.lower() in ops:
            return tmpl, ops[method.lower()]
    return None


def validate(rec):
    op = operation(rec["method"], rec["path"])
    if not op:
        return None, ["%s %s: not an operation of the API" % (rec["method"], rec["path"])]
    tmpl, name = op
    where = "%s %s" % (rec["method"], rec["path"])
    try:
        body = json.loads(rec["body"])
    except ValueError as ex:
        return tmpl, ["%s: body is not JSON: %s" % (where, ex)]
    errs = check(body, DEFS[name], where)
    if tmpl == "/drives/{drive_id}" and body.get("drive_id") != rec["path"].rsplit("/", 1)[1]:
        errs.append("%s: drive_id differs from the path" % where)
    return tmpl, errs


def main():
    # The validator can fail: bodies it must refuse.
    bad = [
        {"method": "PUT", "path": "/vsock", "body": '{"guest_cid": 2, "uds_path": "/x"}'},
        {"method": "PUT", "path": "/vsock", "body": '{"guest_cid": 3}'},
        {"method": "PUT", "path": "/actions", "body": '{"action_type": "Start"}'},
        {"method": "PATCH", "path": "/vm", "body": '{"state": "Paused", "extra": 1}'},
        {"method": "PUT", "path": "/machine-config", "body": '{"vcpu_count": "2", "mem_size_mib": 1}'},
        {"method": "PUT", "path": "/vm", "body": '{"state": "Paused"}'},
        {"method": "PUT", "path": "/snapshot/load",
         "body": '{"snapshot_path": "/s", "mem_backend": {"backend_type": "File"}}'},
    ]
    for rec in bad:
        if not validate(rec)[1]:
            sys.exit("validator accepted a bad request: %r" % rec)

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "requests.jsonl")
        subprocess.run([sys.argv[1], out], check=True)
        recs = [json.loads(l) for l in open(out)]
    seen, errs = set(), []
    for rec in recs:
        tmpl, e = validate(rec)
        errs += e
        if tmpl:
            seen.add((rec["method"], tmpl))
        print("%-5s %-18s %s" % (rec["method"], rec["path"], "ok" if not e else "BAD"))
    missing = NEEDED - seen
    if missing:
        errs.append("never sent: %s" % sorted(missing))
    if errs:
        sys.exit("\n".join(errs))
    print("check_schema: %d requests valid against %s" % (len(recs), SPEC["origin"][:60]))


if __name__ == "__main__":
    main()
