#!/usr/bin/env node
'use strict';
// Plays Envoy's part of the ext_proc protocol against an endpoint picker, message by message,
// with @grpc/grpc-js and Envoy's real message definitions (protos.js).
//
//   node tests/extproc/envoy.js --target 127.0.0.1:PORT [--channels N] [--tls-ca FILE --authority NAME]
//
// A driver, not a test: it reads commands as JSON lines on stdin and prints what happened as
// JSON lines on stdout, so a test (tests/integration/test_extproc.py) can orchestrate a gateway,
// a simulated fleet and any number of streams and assert on every message.
//
// Commands (each names a stream `id`, chosen by the caller):
//   {"op":"open","id":I,"kind":"process"|"check"|"watch"|"raw","service":S,"path":P,"deadline_ms":D,
//    "metadata":{K:V}}   metadata: the call's request headers (Envoy's grpc_service.initial_metadata)
//       process: a Process stream; check/watch: grpc.health.v1.Health with {service: S};
//       raw: a bidirectional stream on path P whose messages are given as hex (bad input).
//   {"op":"send","id":I,"msg":ProcessingRequest}   bytes fields as base64 strings
//   {"op":"send","id":I,"hex":"0a..."}             raw streams: exact message bytes
//   {"op":"end","id":I}      half-close (Envoy does this after the response phase)
//   {"op":"cancel","id":I}   RST_STREAM CANCEL (a client that went away)
//   {"op":"run","id":I,"script":[step...],"deadline_ms":D}
//       a whole stream without round trips through stdin: steps {"send":msg}, {"await":N}
//       (until N responses in all), {"end":true}, {"cancel":true}; many runs go concurrently.
//   {"op":"bench","id":I,"concurrency":C,"requests":N,"headers":HttpHeaders,"body":B64,"response_body":B64}
//       N whole streams, C at a time: headers, the body in one chunk, the picker's answers, a
//       response phase (status 200 headers, response_body, end). Answers one event:
//       {"id":I,"event":"bench","ok":K,"failed":F,"wall_ms":W,"latency_ms":[...]} where a
//       latency is from writing the last body chunk to reading the request_headers answer.
//   {"op":"bench_http","id":I,"concurrency":C,"requests":N,"ports":[P...],"path":P,"body":B64}
//       the same count of HTTP/1.1 POSTs over keep-alive connections (round robin over ports),
//       for the proxy's figures from the same client runtime; latency = the whole request.
//   {"op":"sync","tag":T}    answered by {"event":"sync","tag":T} once every earlier line is read
//   {"op":"quit"}            exit once every stream has ended
// Events:
//   {"event":"ready"}
//   {"id":I,"event":"response","msg":ProcessingResponse|HealthCheckResponse,"n":K,"t_ms":T}
//   {"id":I,"event":"status","code":C,"details":D,"n":K,"t_ms":T}   the stream's end; C=0 OK
//   {"id":I,"event":"error","message":M}                             a driver-side mistake
// t_ms is milliseconds since the driver started (performance.now), for latency measurement.
const readline = require('readline');
const fs = require('fs');
const { performance } = require('perf_hooks');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const protos = require('./protos');

const PROCESS = '/envoy.service.ext_proc.v3.ExternalProcessor/Process';
const CHECK = '/grpc.health.v1.Health/Check';
const WATCH = '/grpc.health.v1.Health/Watch';

function parseArgs(argv) {
  const a = { channels: 1 };
  for (let i = 2; i < argv.length; i++) {
    const k = argv[i];
    const v = argv[i + 1];
    if (k === '--target') { a.target = v; i++; }
    else if (k === '--channels') { a.channels = Math.max(1, parseInt(v, 10)); i++; }
    else if (k === '--tls-ca') { a.tlsCa = v; i++; }
    else if (k === '--authority') { a.authority = v; i++; }
    else throw new Error('unknown argument ' + k);
  }
  if (!a.target) throw new Error('--target HOST:PORT is required');
  return a;
}

// Serializers from the real definitions through proto-loader, as a generated client would
// get them: bytes as base64 strings, enums by name, oneofs named, 64-bit numbers as strings.
function messageTypes() {
  const root = protos.load();
  const def = protoLoader.fromJSON(root.toJSON(), {
    keepCase: true, longs: String, enums: String, bytes: String, defaults: false, oneofs: true,
  });
  const svc = def['envoy.service.ext_proc.v3.ExternalProcessor'].Process;
  const health = def['grpc.health.v1.Health'];
  return { process: svc, check: health.Check, watch: health.Watch };
}

function main() {
  const args = parseArgs(process.argv);
  if (!protos.ready()) {
    process.stderr.write('envoy.js: node_modules missing: run (cd tests/extproc && npm install)\n');
    process.exit(2);
  }
  const types = messageTypes();
  const creds = args.tlsCa ? grpc.credentials.createSsl(fs.readFileSync(args.tlsCa)) : grpc.credentials.createInsecure();
  const opts = { 'grpc.max_receive_message_length': 64 << 20, 'grpc.max_send_message_length': 64 << 20 };
  if (args.authority) opts['grpc.default_authority'] = args.authority;
  // Separate channels need distinct options, or grpc-js shares one subchannel among them.
  const clients = [];
  for (let i = 0; i < args.channels; i++) clients.push(new grpc.Client(args.target, creds, { ...opts, 'sb.channel': i }));
  let nextClient = 0;
  const streams = new Map();
  let quitting = false;
  let inputDone = false;

  const out = (o) => process.stdout.write(JSON.stringify(o) + '\n');
  const now = () => Math.round(performance.now() * 1000) / 1000;

  function maybeExit() {
    if ((quitting || inputDone) && streams.size === 0) {
      for (const c of clients) c.close();
      // Let stdout drain before exiting.
      process.stdout.write('', () => process.exit(0));
    }
  }

  function finish(s, code, details) {
    if (s.done) return;
    s.done = true;
    if (s.timer) clearTimeout(s.timer);
    out({ id: s.id, event: 'status', code, details, n: s.n, t_ms: now() });
    streams.delete(s.id);
    // A script still waiting on responses that will never come.
    for (const w of s.waiters) w.resolve(false);
    s.waiters = [];
    maybeExit();
  }

  function onResponse(s, msg) {
    s.n++;
    out({ id: s.id, event: 'response', msg, n: s.n, t_ms: now() });
    s.waiters = s.waiters.filter((w) => (s.n >= w.n ? (w.resolve(true), false) : true));
  }

  function open(cmd) {
    const id = cmd.id;
    if (streams.has(id)) return out({ id, event: 'error', message: 'stream id in use' });
    const client = clients[nextClient++ % clients.length];
    const deadline = new Date(Date.now() + (cmd.deadline_ms || 30000));
    const md = () => {
      const m = new grpc.Metadata();
      for (const [k, v] of Object.entries(cmd.metadata || {})) m.set(k, v);
      return m;
    };
    const s = { id, kind: cmd.kind || 'process', n: 0, done: false, waiters: [], call: null };
    streams.set(id, s);
    const onStatus = (st) => finish(s, st.code, st.details);
    const onError = () => {}; // the status event carries it
    if (s.kind === 'process' || s.kind === 'raw') {
      const path = s.kind === 'raw' ? cmd.path || PROCESS : PROCESS;
      const ser = s.kind === 'raw' ? (b) => b : types.process.requestSerialize;
      const des = s.kind === 'raw'
        ? (b) => ({ hex: Buffer.from(b).toString('hex') })
        : types.process.responseDeserialize;
      s.call = client.makeBidiStreamRequest(path, ser, des, md(), { deadline });
    } else if (s.kind === 'check') {
      s.call = client.makeUnaryRequest(CHECK, types.check.requestSerialize, types.check.responseDeserialize,
        { service: cmd.service || '' }, md(), { deadline }, (err, resp) => {
          if (resp) onResponse(s, resp);
        });
    } else if (s.kind === 'watch') {
      s.call = client.makeServerStreamRequest(WATCH, types.watch.requestSerialize, types.watch.responseDeserialize,
        { service: cmd.service || '' }, md(), { deadline });
    } else {
      streams.delete(id);
      return out({ id, event: 'error', message: 'unknown kind ' + s.kind });
    }
    if (s.kind !== 'check') s.call.on('data', (m) => onResponse(s, m));
    s.call.on('status', onStatus);
    s.call.on('error', onError);
    return s;
  }

  function send(s, cmd) {
    if (s.done) return;
    try {
      if (s.kind === 'raw') s.call.write(Buffer.from(cmd.hex || '', 'hex'));
      else s.call.write(cmd.msg);
    } catch (e) {
      out({ id: s.id, event: 'error', message: String(e && e.message) });
    }
  }

  function awaitResponses(s, n) {
    if (s.done) return Promise.resolve(false);
    if (s.n >= n) return Promise.resolve(true);
    return new Promise((resolve) => s.waiters.push({ n, resolve }));
  }

  async function run(cmd) {
    const s = open({ ...cmd, kind: 'process' });
    if (!s) return;
    for (const step of cmd.script || []) {
      if (s.done) break;
      if (step.send) send(s, { msg: step.send });
      else if (step.await) { if (!(await awaitResponses(s, step.await))) break; }
      else if (step.end) s.call.end();
      else if (step.cancel) s.call.cancel();
    }
  }

  // One whole picker stream; resolves with the request phase's latency (ms) or null.
  function benchOne(cmd) {
    return new Promise((resolve) => {
      const client = clients[nextClient++ % clients.length];
      const call = client.makeBidiStreamRequest(PROCESS, types.process.requestSerialize,
        types.process.responseDeserialize, new grpc.Metadata(), { deadline: new Date(Date.now() + 60000) });
      let t0 = 0;
      let latency = null;
      let phase = 0; // 0: request phase, 1: response headers sent, 2: response body sent
      call.on('data', (m) => {
        if (m.request_headers && latency === null) latency = performance.now() - t0;
        const bm = m.request_body && m.request_body.response && m.request_body.response.body_mutation;
        if (phase === 0 && bm && bm.streamed_response && bm.streamed_response.end_of_stream) {
          phase = 1;
          call.write({ response_headers: { headers: { headers: [{ key: ':status', raw_value: Buffer.from('200').toString('base64') }] } } });
        } else if (phase === 1 && m.response_headers) {
          phase = 2;
          call.write({ response_body: { body: cmd.response_body, end_of_stream: true } });
        } else if (phase === 2 && m.response_body) {
          call.end();
        } else if (m.immediate_response) {
          call.end();
        }
      });
      call.on('error', () => {});
      call.on('status', (st) => resolve(st.code === 0 && phase === 2 ? latency : null));
      call.write({ request_headers: cmd.headers });
      t0 = performance.now();
      call.write({ request_body: { body: cmd.body, end_of_stream: true } });
    });
  }

  async function pool(n, c, one) {
    const lat = [];
    let failed = 0;
    let next = 0;
    const t0 = performance.now();
    async function worker() {
      while (next < n) {
        next++;
        const l = await one();
        if (l === null) failed++; else lat.push(Math.round(l * 1000) / 1000);
      }
    }
    await Promise.all(Array.from({ length: c }, worker));
    return { ok: lat.length, failed, wall_ms: performance.now() - t0, latency_ms: lat };
  }

  async function bench(cmd) {
    const r = await pool(cmd.requests, cmd.concurrency, () => benchOne(cmd));
    out({ id: cmd.id, event: 'bench', ...r });
  }

  async function benchHttp(cmd) {
    const http = require('http');
    const agent = new http.Agent({ keepAlive: true, maxSockets: cmd.concurrency });
    const body = Buffer.from(cmd.body, 'base64');
    let i = 0;
    const one = () => new Promise((resolve) => {
      const t0 = performance.now();
      const req = http.request({ host: '127.0.0.1', port: cmd.ports[i++ % cmd.ports.length], path: cmd.path || '/v1/chat/completions',
        method: 'POST', agent, headers: { 'content-type': 'application/json', 'content-length': body.length } }, (res) => {
        res.on('data', () => {});
        res.on('end', () => resolve(res.statusCode === 200 ? performance.now() - t0 : null));
      });
      req.on('error', () => resolve(null));
      req.end(body);
    });
    const r = await pool(cmd.requests, cmd.concurrency, one);
    agent.destroy();
    out({ id: cmd.id, event: 'bench', ...r });
  }

  function handle(line) {
    if (!line.trim()) return;
    let cmd;
    try { cmd = JSON.parse(line); } catch (e) { return out({ event: 'error', message: 'bad JSON: ' + line.slice(0, 80) }); }
    const s = streams.get(cmd.id);
    switch (cmd.op) {
      case 'open': open(cmd); break;
      case 'run': run(cmd); break;
      case 'send': if (s) send(s, cmd); else out({ id: cmd.id, event: 'error', message: 'no such stream' }); break;
      case 'end': if (s && s.call.end) s.call.end(); break;
      case 'cancel': if (s) s.call.cancel(); break;
      case 'bench': bench(cmd); break;
      case 'bench_http': benchHttp(cmd); break;
      case 'sync': out({ event: 'sync', tag: cmd.tag }); break;
      case 'quit': quitting = true; maybeExit(); break;
      default: out({ id: cmd.id, event: 'error', message: 'unknown op ' + cmd.op });
    }
  }

  const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  rl.on('line', handle);
  rl.on('close', () => { inputDone = true; maybeExit(); });
  out({ event: 'ready' });
}

main();
