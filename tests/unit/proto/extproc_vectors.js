#!/usr/bin/env node
// extproc_vectors: test vectors for src/proto/extproc.c made with the REAL protocol definitions
// (Envoy's api/ and grpc's health.proto, loaded by protobufjs), so that the codec is checked
// against another implementation and not only against itself.
//
//   node extproc_vectors.js gen   PROTO_DIR... : encodes the ProcessingRequests below into
//                                   tests/fixtures/extproc/requests/NAME.bin (and the health
//                                   request); tests/unit/proto/test_extproc.c decodes them and
//                                   checks every field.
//   node extproc_vectors.js check PROTO_DIR... : decodes tests/fixtures/extproc/responses/*.bin
//                                   (switchboard's encodings, written by test_extproc with
//                                   SB_EXTPROC_WRITE_VECTORS=1) with the real definitions, checks
//                                   what Envoy would read there, and records the decoded form
//                                   beside each as NAME.json. test_extproc then keeps our encoder
//                                   byte-identical to what was checked.
//
// PROTO_DIR: the include roots of the .proto files (see tests/fixtures/extproc/README.md for
// where they come from). Needs protobufjs (npm). Run from the repository root.
'use strict';
const fs = require('fs');
const path = require('path');
const protobuf = require('protobufjs');

const FIX = 'tests/fixtures/extproc';

function load(dirs) {
  const root = new protobuf.Root();
  root.resolvePath = (origin, target) => {
    if (path.isAbsolute(target)) return target;
    for (const d of dirs) {
      const p = path.join(d, target);
      if (fs.existsSync(p)) return p;
    }
    // google/protobuf/*.proto: the copies protobufjs ships (descriptor.proto), or its bundled
    // common definitions (struct.proto, duration.proto) when the name is returned as it is.
    const shipped = path.join(path.dirname(require.resolve('protobufjs/package.json')), target);
    return fs.existsSync(shipped) ? shipped : target;
  };
  root.loadSync(['envoy/service/ext_proc/v3/external_processor.proto', 'grpc/health/v1/health.proto'],
                {keepCase: true});
  root.resolveAll();
  return root;
}

// Header values as Envoy 1.29+ sends them (raw_value only), as older ones did (value only), and
// with both set.
const raw = (key, v) => ({key, raw_value: Buffer.from(v)});
const val = (key, v) => ({key, value: v});
const both = (key, v, r) => ({key, value: v, raw_value: Buffer.from(r)});
// google.protobuf.Struct comes from protobufjs's bundled definitions, whose field names are
// camelCase whatever keepCase says (the numbers are struct.proto's).
const str = (s) => ({stringValue: s});
const list = (...items) => ({listValue: {values: items}});
const lb = (fields) => ({filter_metadata: {'envoy.lb': {fields}}});
// The subset hint has its own namespace (the Inference Extension's SubsetFilter reads it there).
const hint = (fields) => ({filter_metadata: {'envoy.lb.subset_hint': {fields}}});

const BODY = '{"model":"llama","messages":[{"role":"user","content":"hi"}],"stream":true}';

function many(n) {
  const h = [raw(':method', 'POST'), raw(':path', '/v1/chat/completions')];
  for (let i = h.length; i < n; i++) h.push(raw('x-h' + i, 'v' + i));
  return h;
}

const REQUESTS = {
  // Envoy's first message in full-duplex mode: pseudo-headers and client headers in raw_value,
  // the subset hint as a list, the protocol configuration, and attributes (not read: skipped).
  headers_raw: {
    request_headers: {
      headers: {headers: [raw(':method', 'POST'), raw(':path', '/v1/chat/completions'),
                          raw(':authority', 'gw.example'), raw('content-type', 'application/json'),
                          raw('x-request-id', 'req-1'), raw('x-empty', '')]},
      end_of_stream: false,
    },
    metadata_context: hint({'x-gateway-destination-endpoint-subset': list(str('10.0.0.1:8000'), str('10.0.0.2:8000'))}),
    protocol_config: {request_body_mode: 'FULL_DUPLEX_STREAMED', response_body_mode: 'FULL_DUPLEX_STREAMED'},
    attributes: {'envoy.filters.http.ext_proc': {fields: {'request.path': str('/v1/chat/completions'),
                                                          deep: {structValue: {fields: {a: list(list(str('x')))}}}}}},
  },
  // An older Envoy: values in value; no body (end_of_stream on the headers).
  headers_value_eos: {
    request_headers: {headers: {headers: [val(':method', 'GET'), val(':path', '/v1/models'), val('accept', '*/*')]},
                      end_of_stream: true},
  },
  // Both set: value is read.
  headers_both: {
    request_headers: {headers: {headers: [both('x-both', 'from-value', 'from-raw')]}},
  },
  headers_256: {request_headers: {headers: {headers: many(256)}}},
  headers_257: {request_headers: {headers: {headers: many(257)}}},
  body_chunk: {request_body: {body: Buffer.from(BODY.slice(0, 20)), end_of_stream: false}},
  body_eos: {request_body: {body: Buffer.from(BODY), end_of_stream: true}},
  body_empty_eos: {request_body: {end_of_stream: true}},
  // The subset as one string, as an empty list (answer 503), and in a namespace beside others
  // whose values nest (skipped).
  subset_string: {
    request_headers: {headers: {headers: [raw(':method', 'POST')]}},
    metadata_context: {filter_metadata: {
      'envoy.lb.subset_hint': {fields: {'x-gateway-destination-endpoint-subset': str('10.0.0.3:8000,10.0.0.4:8000')}},
      // under envoy.lb the key means nothing: the subset is read from its own namespace only
      'envoy.lb': {fields: {'x-gateway-destination-endpoint-subset': str('10.9.9.9:1')}},
      'other.filter': {fields: {k: {structValue: {fields: {x: {numberValue: 1.5}}}}}},
    }},
  },
  subset_empty: {
    request_headers: {headers: {headers: [raw(':method', 'POST')]}},
    metadata_context: hint({'x-gateway-destination-endpoint-subset': list()}),
  },
  subset_number: {
    request_headers: {headers: {headers: [raw(':method', 'POST')]}},
    metadata_context: hint({'x-gateway-destination-endpoint-subset': list(str('10.0.0.1:8000'), {numberValue: 7})}),
  },
  // The response phase: the endpoint that served (a fallback), as a string and as a list.
  served_string: {
    response_headers: {headers: {headers: [raw(':status', '200'), raw('content-type', 'text/event-stream'),
                                           raw('endpoint-load-metrics', 'TEXT cpu_utilization=0.3')]}},
    metadata_context: lb({'x-gateway-destination-endpoint-served': str('10.0.0.2:8000')}),
  },
  served_list: {
    response_headers: {headers: {headers: [raw(':status', '200')]}},
    metadata_context: lb({'x-gateway-destination-endpoint-served': list(str('10.0.0.5:8000'), str('10.0.0.6:8000'))}),
  },
  response_body_eos: {response_body: {body: Buffer.from('data: [DONE]\n\n'), end_of_stream: true}},
  request_trailers: {request_trailers: {trailers: {headers: [raw('x-trailer', 't')]}}},
  response_trailers: {response_trailers: {trailers: {headers: [raw('grpc-status', '0')]}}},
  observability: {request_body: {body: Buffer.from('{}'), end_of_stream: true}, observability_mode: true},
  protocol_buffered: {
    request_headers: {headers: {headers: [raw(':method', 'POST')]}},
    protocol_config: {request_body_mode: 'BUFFERED', response_body_mode: 'NONE',
                      send_body_without_waiting_for_header_response: true},
  },
};

// What Envoy must read in each of our responses: checked on the real decoding.
const X = 'x-gateway-destination-endpoint';
const DEST = '10.0.0.1:8000,10.0.0.2:8000';
function setHeader(m, key) {
  const h = (m.header_mutation && m.header_mutation.set_headers || []).find((o) => o.header.key === key);
  if (!h) throw new Error('no set_headers entry ' + key);
  if (h.append_action !== 'OVERWRITE_IF_EXISTS_OR_ADD') throw new Error(key + ': append_action ' + h.append_action);
  if (h.header.value) throw new Error(key + ': value set (raw_value expected)');
  return Buffer.from(h.header.raw_value, 'base64').toString();
}
function eq(a, b, what) {
  if (a !== b) throw new Error(`${what}: got ${JSON.stringify(a)}, want ${JSON.stringify(b)}`);
}
function lbMeta(r) {
  return r.dynamic_metadata.fields['envoy.lb'].structValue.fields[X].stringValue;
}
const RESPONSES = {
  headers_destination: (r) => {
    const c = r.request_headers.response;
    eq(setHeader(c, X), DEST, X);
    eq(setHeader(c, 'content-length'), '74', 'content-length');
    eq(c.clear_route_cache, true, 'clear_route_cache');
    eq(c.status || 'CONTINUE', 'CONTINUE', 'status (absent: the default, CONTINUE)');
    eq(lbMeta(r), DEST, 'dynamic_metadata');
  },
  body_streamed: (r) => {
    const s = r.request_body.response.body_mutation.streamed_response;
    eq(Buffer.from(s.body, 'base64').toString(), '{"model":"served"}', 'streamed body');
    eq(s.end_of_stream, true, 'end_of_stream');
  },
  body_buffered: (r) => {
    const c = r.request_body.response;
    eq(setHeader(c, X), DEST, X);
    eq(c.clear_route_cache, true, 'clear_route_cache');
    eq(Buffer.from(c.body_mutation.body, 'base64').toString(), '{"model":"served"}', 'body');
    eq(lbMeta(r), DEST, 'dynamic_metadata');
  },
  response_headers_continue: (r) => {
    if (!('response_headers' in r)) throw new Error('not a response_headers answer');
    eq(r.response_headers.response, undefined, 'common response');
  },
  response_body_echo: (r) => {
    const s = r.response_body.response.body_mutation.streamed_response;
    eq(Buffer.from(s.body, 'base64').toString(), 'data: {"x":1}\n\n', 'echoed chunk');
    eq(s.end_of_stream, undefined, 'end_of_stream (false: absent)');
  },
  request_trailers: (r) => eq(JSON.stringify(r.request_trailers), '{}', 'request_trailers'),
  response_trailers: (r) => eq(JSON.stringify(r.response_trailers), '{}', 'response_trailers'),
  immediate_429: (r) => {
    const i = r.immediate_response;
    eq(i.status.code, 'TooManyRequests', 'status');
    eq(setHeader({header_mutation: i.headers}, 'retry-after'), '1', 'retry-after');
    eq(setHeader({header_mutation: i.headers}, 'x-switchboard-refusal'), 'queue_full', 'refusal');
    eq(setHeader({header_mutation: i.headers}, 'content-type'), 'application/json', 'content-type');
    eq(JSON.parse(Buffer.from(i.body, 'base64').toString()).error.code, 'queue_full', 'body');
    eq(i.details, 'shed', 'details');
  },
  immediate_503: (r) => {
    eq(r.immediate_response.status.code, 'ServiceUnavailable', 'status');
    eq(r.immediate_response.headers, undefined, 'headers');
  },
};

// fromObject drops keys it does not know: a misspelt field would vanish from a vector unseen.
function checkKeys(type, obj, where) {
  for (const [k, v] of Object.entries(obj)) {
    const f = type.fields[k];
    if (!f) throw new Error(`${where}: ${type.name} has no field ${k}`);
    if (!(f.resolvedType instanceof protobuf.Type) || v === null) continue;
    const items = f.map ? Object.values(v) : f.repeated ? v : [v];
    for (const it of items) checkKeys(f.resolvedType, it, `${where}.${k}`);
  }
}

function gen(root) {
  const Req = root.lookupType('envoy.service.ext_proc.v3.ProcessingRequest');
  fs.mkdirSync(`${FIX}/requests`, {recursive: true});
  for (const [name, obj] of Object.entries(REQUESTS)) {
    checkKeys(Req, obj, name);
    fs.writeFileSync(`${FIX}/requests/${name}.bin`, Req.encode(Req.fromObject(obj)).finish());
  }
  const Health = root.lookupType('grpc.health.v1.HealthCheckRequest');
  fs.writeFileSync(`${FIX}/requests/health_named.bin`,
                   Health.encode({service: 'envoy.service.ext_proc.v3.ExternalProcessor'}).finish());
  fs.writeFileSync(`${FIX}/requests/health_empty.bin`, Health.encode({}).finish());
  console.log(`wrote ${Object.keys(REQUESTS).length + 2} request vectors to ${FIX}/requests`);
}

function check(root) {
  const Resp = root.lookupType('envoy.service.ext_proc.v3.ProcessingResponse');
  const opts = {enums: String, bytes: String, defaults: false, oneofs: false};
  let n = 0;
  for (const [name, expect] of Object.entries(RESPONSES)) {
    const buf = fs.readFileSync(`${FIX}/responses/${name}.bin`);
    const obj = Resp.toObject(Resp.decode(buf), opts);
    expect(obj);
    fs.writeFileSync(`${FIX}/responses/${name}.json`, JSON.stringify(obj, null, 2) + '\n');
    n++;
  }
  const HResp = root.lookupType('grpc.health.v1.HealthCheckResponse');
  for (const [name, want] of [['health_serving', 'SERVING'], ['health_not_serving', 'NOT_SERVING']]) {
    const obj = HResp.toObject(HResp.decode(fs.readFileSync(`${FIX}/responses/${name}.bin`)), opts);
    eq(obj.status, want, name);
    fs.writeFileSync(`${FIX}/responses/${name}.json`, JSON.stringify(obj, null, 2) + '\n');
    n++;
  }
  console.log(`${n} responses decoded by the real definitions as expected`);
}

const [mode, ...dirs] = process.argv.slice(2);
if (!['gen', 'check'].includes(mode) || dirs.length === 0) {
  console.error('usage: extproc_vectors.js gen|check PROTO_DIR...');
  process.exit(2);
}
(mode === 'gen' ? gen : check)(load(dirs));
