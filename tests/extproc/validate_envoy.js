#!/usr/bin/env node
'use strict';
// Checks an Envoy bootstrap configuration against Envoy's API definitions (protos.js: the
// .proto files @grpc/grpc-js-xds ships, with envoy_api_additions.json): every field name must
// exist in its message, every enum value in its enum, a oneof may be set once, and each
// typed_config (google.protobuf.Any) is checked as the message its "@type" names. Envoy is not
// packaged for Debian, so this is what can be checked here short of running it.
//
//   python3 -c 'import json,sys,yaml; json.dump(yaml.safe_load(open("deploy/envoy.yaml")), sys.stdout)' \
//     | node tests/extproc/validate_envoy.js
//
// Reads the configuration as JSON on stdin (YAML is parsed by the caller: Python's yaml is at
// hand, and YAML 1.1/1.2 differences do not matter for Envoy's shapes). Prints "ok: N fields
// checked" and exits 0, or prints one line per problem (with its path) and exits 1.
const fs = require('fs');
const path = require('path');
const protobuf = require('protobufjs');
const protos = require('./protos');

const TYPE_PREFIX = 'type.googleapis.com/';
const BOOTSTRAP = 'envoy.config.bootstrap.v3.Bootstrap';

// Loads the files of the packages that the config's "@type" URLs name, so each Any resolves.
function protoFilesFor(typeNames) {
  const files = new Set(['envoy/config/bootstrap/v3/bootstrap.proto']);
  for (const t of typeNames) {
    const parts = t.split('.');
    const dir = parts.slice(0, -1).join('/');
    for (const inc of protos.INCLUDE) {
      const d = path.join(inc, dir);
      if (!fs.existsSync(d)) continue;
      for (const f of fs.readdirSync(d)) if (f.endsWith('.proto')) files.add(path.join(dir, f));
    }
  }
  return [...files];
}

function collectTypes(v, out) {
  if (Array.isArray(v)) v.forEach((x) => collectTypes(x, out));
  else if (v && typeof v === 'object') {
    for (const [k, x] of Object.entries(v)) {
      if (k === '@type' && typeof x === 'string' && x.startsWith(TYPE_PREFIX)) out.add(x.slice(TYPE_PREFIX.length));
      collectTypes(x, out);
    }
  }
  return out;
}

const DURATION = /^-?\d+(\.\d{1,9})?s$/;
const INT_TYPES = new Set(['int32', 'uint32', 'sint32', 'fixed32', 'sfixed32', 'int64', 'uint64', 'sint64', 'fixed64', 'sfixed64']);
const WRAPPERS = {
  'google.protobuf.BoolValue': 'bool', 'google.protobuf.StringValue': 'string', 'google.protobuf.BytesValue': 'bytes',
  'google.protobuf.UInt32Value': 'uint32', 'google.protobuf.Int32Value': 'int32', 'google.protobuf.UInt64Value': 'uint64',
  'google.protobuf.Int64Value': 'int64', 'google.protobuf.DoubleValue': 'double', 'google.protobuf.FloatValue': 'float',
};

function checker(root) {
  const problems = [];
  let checked = 0;
  const bad = (p, msg) => problems.push(p + ': ' + msg);

  function scalar(v, type, p) {
    if (type === 'string' || type === 'bytes') { if (typeof v !== 'string') bad(p, 'expected a string'); return; }
    if (type === 'bool') { if (typeof v !== 'boolean') bad(p, 'expected true or false'); return; }
    if (INT_TYPES.has(type)) {
      if (!(Number.isInteger(v) || (typeof v === 'string' && /^-?\d+$/.test(v)))) bad(p, 'expected an integer');
      else if (type.startsWith('u') || type.startsWith('fixed')) { if (Number(v) < 0) bad(p, 'expected a non-negative integer'); }
      return;
    }
    if (type === 'double' || type === 'float') { if (typeof v !== 'number') bad(p, 'expected a number'); return; }
    bad(p, 'unknown scalar type ' + type);
  }

  function value(v, field, resolved, p) {
    if (resolved instanceof protobuf.Enum) {
      const ok = typeof v === 'string' ? v in resolved.values : Number.isInteger(v) && Object.values(resolved.values).includes(v);
      if (!ok) bad(p, 'unknown value ' + JSON.stringify(v) + ' of enum ' + resolved.fullName.slice(1));
      return;
    }
    if (resolved && resolved.fields) return message(v, resolved, p);
    scalar(v, field.type, p);
  }

  function message(obj, type, p) {
    const name = type.fullName.slice(1);
    if (name === 'google.protobuf.Duration') { if (typeof obj !== 'string' || !DURATION.test(obj)) bad(p, 'expected a duration like "1.5s"'); return; }
    if (name === 'google.protobuf.Struct' || name === 'google.protobuf.Value' || name === 'google.protobuf.ListValue') return;
    if (name === 'google.protobuf.Timestamp' || name === 'google.protobuf.FieldMask') { if (typeof obj !== 'string') bad(p, 'expected a string'); return; }
    if (WRAPPERS[name]) return scalar(obj, WRAPPERS[name], p);
    if (obj === null || typeof obj !== 'object' || Array.isArray(obj)) { bad(p, 'expected a mapping (' + name + ')'); return; }
    if (name === 'google.protobuf.Any') {
      const url = obj['@type'];
      if (typeof url !== 'string' || !url.startsWith(TYPE_PREFIX)) { bad(p, 'an Any needs "@type": "' + TYPE_PREFIX + '..."'); return; }
      const inner = root.lookup(url.slice(TYPE_PREFIX.length));
      if (!inner || !inner.fields) { bad(p, 'unknown @type ' + url); return; }
      const rest = { ...obj };
      delete rest['@type'];
      return message(rest, inner, p + '<' + inner.name + '>');
    }
    const oneofSeen = {};
    for (const [k, v] of Object.entries(obj)) {
      const field = type.fields[k] || Object.values(type.fields).find((f) => f.options && f.options.json_name === k) ||
        Object.values(type.fields).find((f) => camel(f.name) === k);
      const fp = p + '.' + k;
      if (!field) { bad(fp, 'no field "' + k + '" in ' + name); continue; }
      checked++;
      if (field.partOf) {
        const o = field.partOf.name;
        if (oneofSeen[o]) bad(fp, 'oneof ' + o + ' already set by ' + oneofSeen[o]);
        oneofSeen[o] = k;
      }
      field.resolve();
      const resolved = field.resolvedType;
      if (field.map) {
        if (!v || typeof v !== 'object' || Array.isArray(v)) { bad(fp, 'expected a mapping'); continue; }
        for (const [mk, mv] of Object.entries(v)) value(mv, field, resolved, fp + '[' + mk + ']');
      } else if (field.repeated) {
        if (!Array.isArray(v)) { bad(fp, 'expected a list'); continue; }
        v.forEach((x, i) => value(x, field, resolved, fp + '[' + i + ']'));
      } else {
        value(v, field, resolved, fp);
      }
    }
  }

  return { check: (obj, type) => { message(obj, type, ''); return { problems, checked }; } };
}

function camel(s) {
  return s.replace(/_([a-z0-9])/g, (_, c) => c.toUpperCase());
}

function main() {
  if (!protos.ready()) {
    process.stderr.write('validate_envoy.js: node_modules missing: run (cd tests/extproc && npm ci)\n');
    process.exit(2);
  }
  const config = JSON.parse(fs.readFileSync(0, 'utf8'));
  const root = protos.load(protoFilesFor(collectTypes(config, new Set())));
  const { problems, checked } = checker(root).check(config, root.lookupType(BOOTSTRAP));
  if (problems.length) {
    for (const p of problems) process.stdout.write('envoy config: ' + p + '\n');
    process.exit(1);
  }
  process.stdout.write('ok: ' + checked + ' fields checked against ' + BOOTSTRAP + '\n');
}

main();
