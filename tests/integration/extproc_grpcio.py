"""A second ext_proc client, in another gRPC implementation: Python's grpcio (gRPC's C core, from
Debian's python3-grpcio) with message classes built by Python's protobuf from the same Envoy
definitions the node client uses. A framing mistake the node client shared with the server
(HTTP/2 settings, gRPC length prefixes, trailers, ALPN) would show here.

protoc (Debian protobuf-compiler, with libprotobuf-dev's well-known types) compiles the .proto
files into a descriptor set at test time; tests/extproc/envoy_api_additions.json is applied to
it before the classes are made, as protos.js does for node."""
import json
import os
import shutil
import subprocess
import tempfile

from extproc_driver import EXTPROC_DIR

try:
    import grpc
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
except ImportError:  # reported by missing()
    grpc = None

NM = os.path.join(EXTPROC_DIR, "node_modules")
DEPS = os.path.join(NM, "@grpc", "grpc-js-xds", "deps")
INCLUDE = [os.path.join(DEPS, d) for d in ("envoy-api", "xds", "googleapis", "protoc-gen-validate")] + \
          [os.path.join(NM, "grpc-health-check", "proto"), "/usr/include"]
EXT_PROC = "envoy/service/ext_proc/v3/external_processor.proto"
HEALTH = "health/v1/health.proto"
PROCESS = "/envoy.service.ext_proc.v3.ExternalProcessor/Process"
CHECK = "/grpc.health.v1.Health/Check"


def missing():
    if grpc is None:
        return "python3-grpcio and python3-protobuf are needed (scripts/deps.sh test)"
    if not shutil.which("protoc") or not os.path.exists("/usr/include/google/protobuf/struct.proto"):
        return "protoc and its well-known types are needed: protobuf-compiler libprotobuf-dev (scripts/deps.sh test)"
    if not os.path.exists(os.path.join(INCLUDE[0], EXT_PROC)):
        return "tests/extproc/node_modules (Envoy's .proto files) is missing: scripts/deps.sh test"
    return None


_T = {}
_FIELD_TYPES = {"bytes": descriptor_pb2.FieldDescriptorProto.TYPE_BYTES if grpc else 0,
                "bool": descriptor_pb2.FieldDescriptorProto.TYPE_BOOL if grpc else 0}


def _field(f, index_of_oneof=None):
    fd = descriptor_pb2.FieldDescriptorProto(name=f["name"], number=f["id"],
                                             label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    fd.json_name = "".join(w.capitalize() if i else w for i, w in enumerate(f["name"].split("_")))
    if f["type"] in _FIELD_TYPES:
        fd.type = _FIELD_TYPES[f["type"]]
    else:
        fd.type = (descriptor_pb2.FieldDescriptorProto.TYPE_ENUM if f.get("enum")
                   else descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE)
        fd.type_name = "." + f["type"]
    if index_of_oneof is not None:
        fd.oneof_index = index_of_oneof
    return fd


def _find_message(files, full):
    """(file, DescriptorProto) of a message by full name, nested ones included."""
    for fp in files:
        prefix = fp.package + "."
        if not full.startswith(prefix):
            continue
        path = full[len(prefix):].split(".")
        scope = fp.message_type
        m = None
        for part in path:
            m = next((x for x in scope if x.name == part), None)
            if m is None:
                break
            scope = m.nested_type
        if m is not None:
            return fp, m
    raise KeyError(full)


def _apply_additions(fds):
    with open(os.path.join(EXTPROC_DIR, "envoy_api_additions.json")) as f:
        add = json.load(f)
    files = list(fds.file)
    for full, fields in add["messages"].items():
        pkg, name = full.rsplit(".", 1)
        fp = next(x for x in files if x.package == pkg and x.name.endswith("external_processor.proto"))
        if any(m.name == name for m in fp.message_type):
            continue
        m = fp.message_type.add(name=name)
        for f in fields:
            m.field.append(_field(f))
    for full, fields in add["fields"].items():
        fp, m = _find_message(files, full)
        for f in fields:
            if any(x.name == f["name"] for x in m.field):
                continue
            idx = None
            if f.get("oneof"):
                idx = [o.name for o in m.oneof_decl].index(f["oneof"])
            m.field.append(_field(f, idx))
    for full, values in add["enum_values"].items():
        owner, enum = full.rsplit(".", 1)
        fp, m = _find_message(files, owner)
        e = next(x for x in m.enum_type if x.name == enum)
        for k, v in values.items():
            if not any(x.name == k for x in e.value):
                e.value.add(name=k, number=v)


def types():
    """{name: message class} for ProcessingRequest/Response, HealthCheckRequest/Response, Struct."""
    if _T:
        return _T
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "set.pb")
        args = ["protoc", "--include_imports", "--descriptor_set_out=" + out] + ["-I" + i for i in INCLUDE] + \
               [EXT_PROC, HEALTH]
        p = subprocess.run(args, capture_output=True, text=True, timeout=120)
        if p.returncode:
            raise AssertionError("protoc failed: " + p.stderr)
        fds = descriptor_pb2.FileDescriptorSet()
        with open(out, "rb") as f:
            fds.ParseFromString(f.read())
    _apply_additions(fds)
    pool = descriptor_pool.DescriptorPool()
    for fp in fds.file:
        pool.Add(fp)
    factory = message_factory.MessageFactory(pool)

    def cls(name):
        d = pool.FindMessageTypeByName(name)
        get = getattr(message_factory, "GetMessageClass", None)
        return get(d) if get else factory.GetPrototype(d)
    for short, full in (("ProcessingRequest", "envoy.service.ext_proc.v3.ProcessingRequest"),
                        ("ProcessingResponse", "envoy.service.ext_proc.v3.ProcessingResponse"),
                        ("HealthCheckRequest", "grpc.health.v1.HealthCheckRequest"),
                        ("HealthCheckResponse", "grpc.health.v1.HealthCheckResponse")):
        _T[short] = cls(full)
    return _T
