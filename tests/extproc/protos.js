'use strict';
// Loads Envoy's real API definitions (the .proto files @grpc/grpc-js-xds ships in deps/) and
// the gRPC health service's (grpc-health-check), then applies envoy_api_additions.json: the
// ext_proc definitions Envoy added after that snapshot. One loader for the test client
// (envoy.js) and the deploy validator (validate_envoy.js), so both see the same schema.
const fs = require('fs');
const path = require('path');
const protobuf = require('protobufjs');
// Registers google/protobuf/descriptor.proto etc. with protobufjs (Envoy's options import it).
require('@grpc/proto-loader');

const NM = path.join(__dirname, 'node_modules');
const DEPS = path.join(NM, '@grpc', 'grpc-js-xds', 'deps');
const INCLUDE = [
  path.join(DEPS, 'envoy-api'),
  path.join(DEPS, 'xds'),
  path.join(DEPS, 'googleapis'),
  path.join(DEPS, 'protoc-gen-validate'),
  path.join(NM, 'grpc-health-check', 'proto'),
];
const EXT_PROC = 'envoy/service/ext_proc/v3/external_processor.proto';
const HEALTH = 'health/v1/health.proto';

function ready() {
  return fs.existsSync(path.join(INCLUDE[0], EXT_PROC)) && fs.existsSync(path.join(INCLUDE[4], HEALTH));
}

function newRoot() {
  const root = new protobuf.Root();
  root.resolvePath = (origin, target) => {
    if (path.isAbsolute(target)) return target;
    for (const dir of INCLUDE) {
      const p = path.join(dir, target);
      if (fs.existsSync(p)) return p;
    }
    // protobufjs carries google/protobuf's well-known types itself.
    if (target.startsWith('google/protobuf/')) return target;
    throw new Error('proto import not found: ' + target);
  };
  return root;
}

function applyAdditions(root) {
  const add = JSON.parse(fs.readFileSync(path.join(__dirname, 'envoy_api_additions.json'), 'utf8'));
  const fieldOf = (f) => new protobuf.Field(f.name, f.id, '.' + f.type.replace(/^\./, ''));
  for (const [name, fields] of Object.entries(add.messages)) {
    if (root.lookup(name)) continue; // a newer snapshot has it already
    const dot = name.lastIndexOf('.');
    const ns = root.lookup(name.slice(0, dot));
    const t = new protobuf.Type(name.slice(dot + 1));
    for (const f of fields) t.add(f.type === 'bytes' || f.type === 'bool' ? new protobuf.Field(f.name, f.id, f.type) : fieldOf(f));
    ns.add(t);
  }
  for (const [name, fields] of Object.entries(add.fields)) {
    const t = root.lookupType(name);
    for (const f of fields) {
      if (t.fields[f.name]) continue;
      const field = fieldOf(f);
      t.add(field);
      if (f.oneof) t.oneofs[f.oneof].add(field);
    }
  }
  for (const [name, values] of Object.entries(add.enum_values)) {
    const e = root.lookupEnum(name);
    for (const [k, v] of Object.entries(values)) if (!(k in e.values)) e.add(k, v);
  }
}

// files: extra .proto paths (relative to the include dirs) to load into the same root.
function load(files = []) {
  const root = newRoot();
  root.loadSync([EXT_PROC, HEALTH, ...files], { keepCase: true });
  applyAdditions(root);
  root.resolveAll();
  return root;
}

module.exports = { load, ready, INCLUDE, DEPS, EXT_PROC, HEALTH };
