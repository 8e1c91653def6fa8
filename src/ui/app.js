// switchboard dashboard. Plain JS, no framework and no build step: the admin listener serves
// this file from the binary (net/ui.h). Every second it reads the listener's own pages
// (/metrics, /debug/endpoints, /debug/adaptive, /debug/decisions) and redraws.
//
// Access: these files are served without the admin token (they hold no fleet data); the data
// pages keep it. When one answers 401 the page asks for the token, keeps it in this tab's
// sessionStorage (gone when the tab closes, never in localStorage or a cookie, so no other
// site can make the browser send it) and sends it as Authorization: Bearer.
//
// Everything from the gateway is put in the page as text (textContent), never as markup:
// pool names and addresses come from configuration and registrations.
'use strict';

const POLL_MS = 1000;
// Client-side history kept for rates, percentiles and charts: the widest window (5 min) and a
// little more. Each kept scrape holds only the families the page reads (KEEP), so memory stays
// bounded by (families x series x scrapes) whatever else /metrics grows to hold.
const HISTORY_MAX_S = 310;
const KEEP = /^switchboard_(request_duration_seconds|time_to_first_token_seconds|inter_token_latency_seconds|queue_wait_seconds)_(bucket|count)$|^switchboard_(prompt|cached|completion)_tokens_total$|^switchboard_requests_total$|^switchboard_prefix_index_entries$|^switchboard_queue_(length|dispatched_total|refused_total)$|^switchboard_rejected_total$|^process_start_time_seconds$/;
const TOKEN_KEY = 'switchboard-admin-token';
const SCORER_CLASSES = 5;

const state = {
  paused: false,
  needToken: false,
  scrapes: [], // [{t: seconds, m: parsed metrics}] oldest first, bounded by HISTORY_MAX_S
  endpoints: null,
  adaptive: null,
  decisions: null,
  selected: null, // the decision open in the detail pane (a copy: the ring moves on)
  // Per data page, why its last read failed (null: it worked): each section says so in place,
  // and the others keep drawing.
  failed: { metrics: null, endpoints: null, adaptive: null, decisions: null },
  // Per pool, the adaptive loop's samples and regime changes accumulated across polls, keyed by
  // the server's own tick time, so the charts reach back further than the server's ring.
  adaptiveHist: new Map(),
  inFlight: false,
};

// ---- small DOM helpers -------------------------------------------------------------------

function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? '' : v);
  }
  for (const kid of kids.flat()) {
    if (kid === undefined || kid === null || kid === false) continue;
    el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return el;
}

const SVG_NS = 'http://www.w3.org/2000/svg';
function s(tag, attrs, ...kids) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== undefined && v !== null) el.setAttribute(k, v);
  for (const kid of kids.flat()) if (kid) el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  return el;
}

function replace(id, ...kids) {
  const el = document.getElementById(id);
  el.replaceChildren(...kids.flat().filter(Boolean));
  return el;
}

function fmt(v, digits = 2) {
  if (v === null || v === undefined || Number.isNaN(v)) return '—';
  if (!Number.isFinite(v)) return v > 0 ? '∞' : '-∞';
  if (Math.abs(v) >= 1000) return v.toFixed(0);
  return Number(v.toFixed(digits)).toString();
}

function fmtMs(seconds) {
  if (seconds === null || seconds === undefined || Number.isNaN(seconds)) return '—';
  const ms = seconds * 1000;
  return ms >= 1000 ? (ms / 1000).toFixed(2) + ' s' : ms >= 10 ? ms.toFixed(0) + ' ms' : ms.toFixed(1) + ' ms';
}

function pct(v) { return v === null || v === undefined || Number.isNaN(v) ? '—' : (v * 100).toFixed(1) + '%'; }

function badge(text, cls) { return h('span', { class: 'badge ' + (cls || '') }, text); }

// ---- Prometheus text -----------------------------------------------------------------------

// Parses the text exposition format into {name -> [{labels, value}]}. Linear in the text;
// comments and malformed lines are skipped (the page shows what it can read).
function parseProm(text, keep) {
  const out = new Map();
  for (const line of text.split('\n')) {
    if (!line || line[0] === '#') continue;
    let i = 0;
    while (i < line.length && line[i] !== '{' && line[i] !== ' ') i++;
    const name = line.slice(0, i);
    if (keep && !keep.test(name)) continue;
    const labels = {};
    if (line[i] === '{') {
      i++;
      while (i < line.length && line[i] !== '}') {
        const eq = line.indexOf('=', i);
        if (eq < 0 || line[eq + 1] !== '"') break;
        const key = line.slice(i, eq).trim();
        let j = eq + 2, val = '';
        while (j < line.length && line[j] !== '"') {
          if (line[j] === '\\' && j + 1 < line.length) {
            const c = line[j + 1];
            val += c === 'n' ? '\n' : c;
            j += 2;
          } else val += line[j++];
        }
        labels[key] = val;
        i = j + 1;
        if (line[i] === ',') i++;
      }
      i++; // '}'
    }
    const value = parseFloat(line.slice(i).trim().split(' ')[0]);
    if (!name || Number.isNaN(value) && !/NaN/.test(line.slice(i))) continue;
    if (!out.has(name)) out.set(name, []);
    out.get(name).push({ labels, value });
  }
  return out;
}

function series(m, name) { return (m && m.get(name)) || []; }

// The grouping key of a series: its pool, and its model when the gateway labels one.
function groupKey(labels) { return labels.model !== undefined ? labels.pool + '\u0000' + labels.model : labels.pool; }
function groupName(key) { const [p, mo] = key.split('\u0000'); return { pool: p, model: mo }; }

// Sums a counter's series by group key (other labels, e.g. adapter or band, summed over).
function sumBy(m, name, keyFn = groupKey, filter) {
  const acc = new Map();
  for (const { labels, value } of series(m, name)) {
    if (filter && !filter(labels)) continue;
    const k = keyFn(labels);
    acc.set(k, (acc.get(k) || 0) + value);
  }
  return acc;
}

// A histogram's cumulative buckets by group: key -> Map(le -> count).
function bucketsBy(m, name) {
  const acc = new Map();
  for (const { labels, value } of series(m, name + '_bucket')) {
    const k = groupKey(labels);
    if (!acc.has(k)) acc.set(k, new Map());
    const b = acc.get(k);
    b.set(labels.le, (b.get(labels.le) || 0) + value);
  }
  return acc;
}

// The q-quantile of the observations between two scrapes of cumulative buckets, interpolated
// linearly inside the bucket as Prometheus' histogram_quantile does. null when none.
// le values are text: '+Inf' (what Prometheus writes) is not a number to parseFloat, and a NaN
// in the comparator would leave it anywhere in the order, so it is mapped to Infinity first.
function leValue(le) { return /^\+?Inf$/i.test(le) ? Infinity : parseFloat(le); }

function quantile(q, now, then) {
  const les = [...now.keys()].sort((a, b) => leValue(a) - leValue(b));
  const cum = les.map((le) => (now.get(le) || 0) - ((then && then.get(le)) || 0));
  const total = cum[cum.length - 1];
  if (!total || total <= 0) return null;
  const rank = q * total;
  for (let i = 0; i < les.length; i++) {
    if (cum[i] >= rank) {
      const hi = leValue(les[i]);
      const lo = i ? leValue(les[i - 1]) : 0;
      if (!Number.isFinite(hi)) return lo; // in +Inf: the highest finite bound, as Prometheus
      const below = i ? cum[i - 1] : 0;
      const inBucket = cum[i] - below;
      return inBucket > 0 ? lo + (hi - lo) * ((rank - below) / inBucket) : hi;
    }
  }
  return null;
}

// The scrape to compare the newest with: the oldest one inside the window (the window is
// what the operator chose; fewer scrapes early on).
function windowBase() {
  const w = parseFloat(document.getElementById('window').value);
  const last = state.scrapes[state.scrapes.length - 1];
  if (!last) return null;
  for (const sc of state.scrapes) if (last.t - sc.t <= w + 0.5) return sc === last ? null : sc;
  return null;
}

// ---- charts (own SVG: a few line charts and sparklines need no library) --------------------

function sparkline(values, cls) {
  const w = 90, hgt = 18;
  const vs = values.filter((v) => Number.isFinite(v));
  if (vs.length < 2) return s('svg', { class: 'spark', viewBox: `0 0 ${w} ${hgt}` });
  const max = Math.max(...vs, 1e-9), min = Math.min(0, ...vs);
  const pts = values.map((v, i) => `${(i / (values.length - 1)) * w},${hgt - 1 - ((Number.isFinite(v) ? v : 0) - min) / (max - min || 1) * (hgt - 2)}`);
  return s('svg', { class: 'spark', viewBox: `0 0 ${w} ${hgt}`, preserveAspectRatio: 'none' },
    s('polyline', { class: cls || 'c0', points: pts.join(' ') }));
}

// A line chart over time: lines [{label, cls, points: [[tSecondsAgo, v]]}], marks
// [{ago, cls, label}] drawn as dashed verticals. x runs from spanS ago (left) to now (right).
function lineChart(lines, marks, spanS, yMax) {
  const W = 600, H = 150, L = 34, R = 6, T = 8, B = 18;
  let max = yMax || 0;
  if (!yMax) for (const l of lines) for (const [, v] of l.points) if (v > max) max = v;
  if (max <= 0) max = 1;
  const x = (ago) => L + (W - L - R) * (1 - Math.min(ago, spanS) / spanS);
  const y = (v) => T + (H - T - B) * (1 - Math.max(0, v) / max);
  const kids = [
    s('line', { class: 'axis', x1: L, x2: W - R, y1: y(0), y2: y(0) }),
    s('line', { class: 'axis', x1: L, x2: L, y1: T, y2: y(0) }),
    s('text', { x: 2, y: T + 8 }, fmt(max)),
    s('text', { x: 2, y: y(0) }, '0'),
    s('text', { x: L, y: H - 4 }, `${Math.round(spanS)} s ago`),
    s('text', { x: W - R - 22, y: H - 4 }, 'now'),
  ];
  for (const mk of marks || []) {
    if (mk.ago > spanS) continue;
    kids.push(s('line', { class: 'mark ' + (mk.cls || ''), x1: x(mk.ago), x2: x(mk.ago), y1: T, y2: y(0) },
      s('title', {}, mk.label)));
  }
  for (const l of lines) {
    if (!l.points.length) continue;
    kids.push(s('polyline', { class: l.cls, points: l.points.map(([a, v]) => `${x(a).toFixed(1)},${y(v).toFixed(1)}`).join(' ') },
      s('title', {}, l.label)));
  }
  return s('svg', { class: 'chart', viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: 'none', role: 'img' }, kids);
}

function legend(lines) {
  return h('div', { class: 'legend' }, lines.map((l) => h('span', {}, h('i', { class: l.cls }), l.label)));
}

// ---- fetching ------------------------------------------------------------------------------

class Unauthorized extends Error {}

async function get(path, asText) {
  const headers = {};
  const tok = sessionStorage.getItem(TOKEN_KEY);
  if (tok) headers.Authorization = 'Bearer ' + tok;
  const r = await fetch(path, { headers, cache: 'no-store' });
  if (r.status === 401) throw new Unauthorized(path);
  if (r.status === 404) return null; // a debug page turned off (debug_endpoints: false)
  if (!r.ok) throw new Error(`${path}: HTTP ${r.status}`);
  return asText ? r.text() : r.json();
}

// The gateway process's start (process_start_time_seconds), null when the scrape lacks it.
function gatewayStart(m) {
  const x = series(m, 'process_start_time_seconds');
  return x.length ? x[0].value : null;
}

// Keeps one scrape. A new process start means the gateway restarted: counter deltas across it
// would be nonsense (negative, or too small when the new process has already counted more), and
// the adaptive loop's samples belong to the old process, so both histories start again. Counters
// alone cannot tell: a reload that drops a pool lowers the totals without a restart.
function keepScrape(t, m) {
  const prev = state.scrapes[state.scrapes.length - 1];
  const was = prev ? gatewayStart(prev.m) : null, now = gatewayStart(m);
  if (was !== null && now !== null && was !== now) {
    state.scrapes = [];
    state.adaptiveHist.clear();
  }
  state.scrapes.push({ t, m });
  while (state.scrapes.length && t - state.scrapes[0].t > HISTORY_MAX_S) state.scrapes.shift();
}

// The data pages, read together; each one's failure stays its own: a section whose page failed
// says why, the others draw (one refused read must not blank the whole page).
const PAGES = [
  ['metrics', () => get('/metrics', true)],
  ['endpoints', () => get('/debug/endpoints')],
  ['adaptive', () => get('/debug/adaptive')],
  ['decisions', () => get('/debug/decisions?limit=50')],
];

async function poll() {
  if (state.paused || state.needToken || state.inFlight) return;
  state.inFlight = true;
  try {
    const got = await Promise.allSettled(PAGES.map(([, f]) => f()));
    if (got.some((r) => r.status === 'rejected' && r.reason instanceof Unauthorized)) {
      askToken(sessionStorage.getItem(TOKEN_KEY) ? 'that token was refused' : null);
      return;
    }
    const val = {};
    PAGES.forEach(([name], i) => {
      state.failed[name] = got[i].status === 'rejected' ? String(got[i].reason && got[i].reason.message || got[i].reason) : null;
      val[name] = got[i].value;
    });
    if (!state.failed.metrics) keepScrape(performance.now() / 1000, parseProm(val.metrics || '', KEEP));
    if (!state.failed.endpoints) state.endpoints = val.endpoints;
    if (!state.failed.adaptive) { state.adaptive = val.adaptive; mergeAdaptive(val.adaptive); }
    if (!state.failed.decisions) state.decisions = val.decisions;
    const bad = PAGES.filter(([name]) => state.failed[name]);
    if (bad.length === PAGES.length) setStatus('cannot reach the gateway: ' + state.failed.metrics, 'bad');
    else if (bad.length) setStatus(`live · ${new Date().toLocaleTimeString()} · ${bad.map(([n]) => n).join(', ')} failed`, 'warn');
    else setStatus('live · ' + new Date().toLocaleTimeString(), 'ok');
    render();
  } finally {
    state.inFlight = false;
  }
}

// Draws, in place of a section, why its page could not be read; true when it did.
function showFailure(id, page) {
  if (!state.failed[page]) return false;
  replace(id, h('p', { class: 'bad', 'data-failed': page }, `could not read this section's data: ${state.failed[page]}`));
  return true;
}

function setStatus(text, cls) {
  const el = document.getElementById('status');
  el.textContent = text;
  el.className = 'status ' + (cls || '');
}

function askToken(error) {
  state.needToken = true;
  sessionStorage.removeItem(TOKEN_KEY);
  document.getElementById('forget').hidden = true;
  const err = document.getElementById('login-error');
  err.hidden = !error;
  err.textContent = error || '';
  document.getElementById('login').hidden = false;
  document.getElementById('token').focus();
  setStatus('admin token needed', 'bad');
}

// ---- sections ------------------------------------------------------------------------------

function render() {
  const tasks = [renderTraffic, renderPools, renderAdaptive, renderFlow, renderDecisions];
  for (const f of tasks) {
    try { f(); } catch (e) { console.warn('render', f.name, e); }
  }
}

function renderTraffic() {
  if (showFailure('traffic-body', 'metrics')) return;
  const last = state.scrapes[state.scrapes.length - 1];
  if (!last) return;
  const base = windowBase();
  const dt = base ? last.t - base.t : 0;
  const count = (m) => sumBy(m, 'switchboard_request_duration_seconds_count');
  const nowN = count(last.m), thenN = base ? count(base.m) : new Map();
  const hs = {};
  for (const [key, name] of [['ttft', 'switchboard_time_to_first_token_seconds'], ['itl', 'switchboard_inter_token_latency_seconds'],
    ['e2e', 'switchboard_request_duration_seconds']]) {
    hs[key] = { now: bucketsBy(last.m, name), then: base ? bucketsBy(base.m, name) : new Map() };
  }
  const tok = {};
  for (const k of ['prompt', 'cached', 'completion']) {
    tok[k] = { now: sumBy(last.m, `switchboard_${k}_tokens_total`), then: base ? sumBy(base.m, `switchboard_${k}_tokens_total`) : new Map() };
  }
  const keys = [...new Set([...nowN.keys(), ...hs.ttft.now.keys()])].sort();
  // Per-group request-rate history for the sparkline: one point per kept scrape pair.
  const rateHistory = (key) => {
    const pts = [];
    for (let i = Math.max(1, state.scrapes.length - 60); i < state.scrapes.length; i++) {
      const a = state.scrapes[i - 1], b = state.scrapes[i];
      const d = (count(b.m).get(key) || 0) - (count(a.m).get(key) || 0);
      pts.push(d / Math.max(b.t - a.t, 1e-3));
    }
    return pts;
  };
  const d = (o, k) => (o.now.get(k) || 0) - ((o.then && o.then.get(k)) || 0);
  const q = (o, k, p) => (o.now.has(k) ? quantile(p, o.now.get(k), o.then.get(k)) : null);
  const anyModel = keys.some((k) => groupName(k).model !== undefined);
  const rows = keys.map((k) => {
    const { pool, model } = groupName(k);
    const n = (nowN.get(k) || 0) - (thenN.get(k) || 0);
    const prompt = d(tok.prompt, k), cached = d(tok.cached, k);
    return h('tr', { 'data-group': k.replace('\u0000', '/') },
      h('td', {}, pool), anyModel ? h('td', { class: 'l' }, model || '') : null,
      h('td', { class: 'num', 'data-field': 'rate' }, dt ? fmt(n / dt) : '—'),
      h('td', {}, sparkline(rateHistory(k))),
      h('td', { class: 'num', 'data-field': 'requests' }, fmt(n, 0)),
      h('td', { class: 'num', 'data-field': 'ttft-p50' }, fmtMs(q(hs.ttft, k, 0.5))),
      h('td', { class: 'num' }, fmtMs(q(hs.ttft, k, 0.9))),
      h('td', { class: 'num' }, fmtMs(q(hs.ttft, k, 0.99))),
      h('td', { class: 'num', 'data-field': 'itl-p50' }, fmtMs(q(hs.itl, k, 0.5))),
      h('td', { class: 'num' }, fmtMs(q(hs.itl, k, 0.9))),
      h('td', { class: 'num' }, fmtMs(q(hs.itl, k, 0.99))),
      h('td', { class: 'num' }, fmtMs(q(hs.e2e, k, 0.5))),
      h('td', { class: 'num' }, fmtMs(q(hs.e2e, k, 0.99))),
      h('td', { class: 'num', 'data-field': 'hit-ratio' }, prompt > 0 ? pct(cached / prompt) : '—'),
      h('td', { class: 'num' }, dt ? fmt(d(tok.completion, k) / dt, 1) : '—'));
  });
  replace('traffic-body', h('table', {},
    h('thead', {}, h('tr', {}, h('th', {}, 'pool'), anyModel ? h('th', { class: 'l' }, 'model') : null,
      h('th', {}, 'req/s'), h('th', {}, ''), h('th', {}, 'requests'),
      h('th', {}, 'TTFT p50'), h('th', {}, 'p90'), h('th', {}, 'p99'),
      h('th', {}, 'ITL p50'), h('th', {}, 'p90'), h('th', {}, 'p99'),
      h('th', {}, 'E2E p50'), h('th', {}, 'p99'), h('th', { title: 'cached / prompt tokens (upstream usage)' }, 'prefix hit'),
      h('th', {}, 'out tok/s'))),
    h('tbody', {}, rows)),
    base ? null : h('p', { class: 'dim' }, 'rates and percentiles appear from the second read on'));
}

// Requests answered per second by each endpoint over the window (switchboard_requests_total),
// keyed "pool address"; null before the second read.
function endpointRates() {
  const last = state.scrapes[state.scrapes.length - 1], base = windowBase();
  if (!last || !base) return null;
  const f = (m) => sumBy(m, 'switchboard_requests_total', (l) => l.pool + ' ' + l.endpoint);
  const now = f(last.m), then = f(base.m), out = new Map();
  for (const [k, v] of now) out.set(k, (v - (then.get(k) || 0)) / (last.t - base.t));
  return out;
}

function healthBadge(ep) {
  const cls = ep.health === 'healthy' ? 'ok' : ep.health === 'half-open' || ep.health === 'draining' ? 'warn' : 'bad';
  return badge(ep.health || '?', cls);
}

function renderPools() {
  if (showFailure('pools-body', 'endpoints')) return;
  const data = state.endpoints;
  if (!data) { replace('pools-body', h('p', { class: 'dim' }, '/debug/endpoints is off (debug_endpoints: false)')); return; }
  const last = state.scrapes[state.scrapes.length - 1];
  const prefixEntries = last ? sumBy(last.m, 'switchboard_prefix_index_entries', (l) => l.pool) : new Map();
  const rates = endpointRates();
  const out = [];
  for (const pool of data.pools || []) {
    const eps = pool.endpoints || [];
    out.push(h('h3', {}, `${pool.pool} `, h('small', {}, `profile ${pool.profile} · ${eps.length} endpoint${eps.length === 1 ? '' : 's'} · stale after ${pool.stale_ms} ms · prefix index ${fmt(prefixEntries.get(pool.pool) || 0, 0)} entries`)));
    const rows = [];
    for (const ep of eps) {
      const r = ep.report || {}, own = ep.own || {}, out2 = ep.outlier || {}, ix = ep.prefix_index || null;
      const notes = [];
      if (r.engine && r.engine.in_use === null) notes.push('engine not detected yet');
      if (r.error) notes.push('engine: ' + r.error);
      if (r.models_error) notes.push('models: ' + r.models_error);
      if (ep.down_reason) notes.push('down: ' + ep.down_reason);
      const rate = rates ? rates.get(pool.pool + ' ' + ep.address) ?? 0 : null;
      rows.push(h('tr', { 'data-endpoint': ep.address },
        h('td', {}, ep.address),
        h('td', { class: 'l' }, healthBadge(ep), ep.available ? '' : ' ', ep.available ? null : badge('unavailable', 'bad')),
        h('td', { class: 'num', 'data-field': 'waiting' }, fmt(r.waiting)),
        h('td', { class: 'num', 'data-field': 'running' }, fmt(r.running)),
        h('td', { class: 'num' }, h('meter', { min: 0, max: 1, low: 0.7, high: 0.9, optimum: 0, value: r.kv_cache_usage ?? 0 }), ' ', pct(r.kv_cache_usage)),
        h('td', { class: 'num', 'data-field': 'in-flight' }, fmt(own.in_flight, 0)),
        h('td', { class: 'num', 'data-field': 'dispatched' }, fmt(own.dispatched, 0)),
        h('td', { class: 'num' }, rate === null ? '—' : fmt(rate)),
        h('td', { class: 'l' }, ep.stale ? badge('stale', 'warn') : badge('fresh', 'ok'), ' ', `${r.source || 'none'} ${r.age_ms >= 0 ? fmt(r.age_ms, 0) + ' ms' : ''}`),
        h('td', { class: 'l' }, r.engine ? `${r.engine.in_use ?? '?'}${r.engine.configured === 'auto' ? ' (auto)' : ''}` : '—'),
        h('td', { class: 'num' }, fmt(out2.ejections ?? 0, 0), out2.consecutive_failures ? h('span', { class: 'bad' }, ` (${out2.consecutive_failures} failing)`) : null),
        h('td', { class: 'num' }, ix ? `${fmt(ix.blocks, 0)} / ${fmt(ix.capacity_blocks, 0)}` : '—'),
        h('td', { class: 'l' }, notes.map((n) => h('div', { class: 'note' }, n)))));
    }
    out.push(h('table', {}, h('thead', {}, h('tr', {},
      ['endpoint', 'health', 'waiting', 'running', 'KV use', 'in flight', 'sent', 'req/s', 'report', 'engine', 'ejections', 'prefix blocks', ''].map((t) => h('th', {}, t)))),
    h('tbody', {}, rows)));
  }
  replace('pools-body', out);
}

// Why a regime change matters, in the operator's words (core/adaptive.h).
function explainChange(c, det) {
  const th = det ? (c.event === 'entered' ? ` (reached enter ${fmt(det.enter)})` : ` (fell to exit ${fmt(det.exit)})`) : '';
  const what = {
    imbalance: c.event === 'entered'
      ? 'load spread unevenly across endpoints: scorer weight moves from affinity (prefix, LoRA) to distribution (queue, KV, in-flight)'
      : 'load evened out: weight returns toward affinity scorers',
    burst: c.event === 'entered' ? 'arrivals stepped up above their long-run rate' : 'arrival rate back to its long-run average',
    saturation: c.event === 'entered'
      ? 'many endpoints are saturated, stale or unavailable: expect queueing and shedding'
      : 'enough endpoints have room again',
  }[c.detector] || '';
  return `${c.detector} ${c.event} at signal ${fmt(c.signal)}${th}: ${what}`;
}

// The server renders each sample as ago_ms before its last tick (now_ns, monotonic): the
// sample's own time, now_ns/1e6 - ago_ms, is the same in every poll, so it keys the merge.
function mergeAdaptive(data) {
  for (const p of (data && data.pools) || []) {
    const st = p.state;
    if (!st) continue;
    if (!state.adaptiveHist.has(p.pool)) state.adaptiveHist.set(p.pool, { samples: new Map(), changes: new Map() });
    const hh = state.adaptiveHist.get(p.pool);
    const nowMs = st.now_ns / 1e6;
    for (const x of st.history || []) hh.samples.set(Math.round(nowMs - x.ago_ms), x);
    for (const c of st.changes || []) hh.changes.set(`${Math.round(nowMs - c.ago_ms)} ${c.detector} ${c.event}`, { ...c, at: nowMs - c.ago_ms });
    for (const [k] of hh.samples) if (nowMs - k > HISTORY_MAX_S * 1000) hh.samples.delete(k);
    for (const [k, c] of hh.changes) if (nowMs - c.at > HISTORY_MAX_S * 1000) hh.changes.delete(k);
  }
}

function renderAdaptive() {
  if (showFailure('adaptive-body', 'adaptive')) return;
  const data = state.adaptive;
  if (!data) { replace('adaptive-body', h('p', { class: 'dim' }, '/debug/adaptive is off (debug_endpoints: false)')); return; }
  const cards = [];
  for (const p of data.pools || []) {
    const st = p.state;
    if (!st) { cards.push(h('div', {}, h('h3', {}, p.pool), h('p', { class: 'dim' }, 'no adaptive state'))); continue; }
    const hh = state.adaptiveHist.get(p.pool);
    const nowMs = st.now_ns / 1e6;
    const span = parseFloat(document.getElementById('window').value);
    const hist = [...hh.samples].sort((a, b) => a[0] - b[0]).map(([t, x]) => ({ ...x, ago: (nowMs - t) / 1000 }))
      .filter((x) => x.ago <= span);
    const names = (st.detectors || []).map((d) => d.name);
    const sig = names.map((n, i) => ({ label: n, cls: 'c' + (i % SCORER_CLASSES), points: hist.map((x) => [x.ago, x.signal[i]]) }));
    const share = [{ label: 'distribution share of the weight', cls: 'c3', points: hist.map((x) => [x.ago, x.share]) }];
    const dets = Object.fromEntries((st.detectors || []).map((d) => [d.name, d]));
    const changes = [...hh.changes.values()].sort((a, b) => a.at - b.at).map((c) => ({ ...c, ago_ms: nowMs - c.at }));
    const marks = changes.map((c) => ({ ago: c.ago_ms / 1000, cls: c.event, label: explainChange(c, dets[c.detector]) }));
    const wsum = (st.weights.scorers || []).reduce((a, w) => a + w.weight, 0) || 1;
    cards.push(h('div', { 'data-pool': p.pool },
      h('h3', {}, p.pool, ' ', h('small', {}, `${p.adaptive ? 'adaptive on' : 'adaptive off (signals only)'} · profile ${st.profile} · generation ${st.generation}`)),
      h('div', {}, (st.detectors || []).map((d) => h('span', {}, d.regime ? badge(`${d.name} ${fmt(d.signal)}`, 'bad') : badge(`${d.name} ${fmt(d.signal)}`, 'ok'), ' '))),
      lineChart(sig, marks, span, 1), legend(sig),
      lineChart(share, marks, span, 1), legend(share),
      h('table', {}, h('thead', {}, h('tr', {}, h('th', {}, 'scorer'), h('th', { class: 'l' }, 'category'), h('th', {}, 'weight'), h('th', {}, 'base'), h('th', {}, 'share'))),
        h('tbody', {}, (st.weights.scorers || []).map((w) => h('tr', {}, h('td', {}, w.name), h('td', { class: 'l' }, w.category),
          h('td', { class: 'num' }, fmt(w.weight, 3)), h('td', { class: 'num' }, fmt(w.base, 3)), h('td', { class: 'num' }, pct(w.weight / wsum)))))),
      h('div', {}, h('strong', {}, 'Regime changes'), changes.length
        ? h('ul', { class: 'changes' }, changes.slice().reverse().map((c) => h('li', { class: c.event === 'entered' ? 'bad' : '' },
          `${fmt(c.ago_ms / 1000, 1)} s ago: ${explainChange(c, dets[c.detector])}`)))
        : h('p', { class: 'dim' }, 'none since this page opened (or in the gateway\'s kept history)'))));
  }
  replace('adaptive-body', h('div', { class: 'grid2' }, cards));
}

function renderFlow() {
  if (showFailure('flow-body', 'metrics')) return;
  const last = state.scrapes[state.scrapes.length - 1];
  if (!last) return;
  const base = windowBase();
  const len = series(last.m, 'switchboard_queue_length');
  const parts = [];
  if (!len.length) {
    parts.push(h('p', { class: 'dim' }, 'flow control is off: requests go straight to scheduling'));
  } else {
    const byPB = (m, name, key) => sumBy(m, name, key);
    const pb = (l) => l.pool + ' ' + l.band;
    const disp = byPB(last.m, 'switchboard_queue_dispatched_total', pb);
    const waitB = bucketsBy(last.m, 'switchboard_queue_wait_seconds');
    const waitB0 = base ? bucketsBy(base.m, 'switchboard_queue_wait_seconds') : new Map();
    const reasons = [...new Set(series(last.m, 'switchboard_queue_refused_total').map((x) => x.labels.reason))].sort();
    const ref = byPB(last.m, 'switchboard_queue_refused_total', (l) => `${l.pool} ${l.band} ${l.reason}`);
    const ref0 = base ? byPB(base.m, 'switchboard_queue_refused_total', (l) => `${l.pool} ${l.band} ${l.reason}`) : new Map();
    const rows = len.map(({ labels, value }) => {
      const k = labels.pool + ' ' + labels.band;
      return h('tr', { 'data-queue': k },
        h('td', {}, labels.pool), h('td', { class: 'l' }, labels.band),
        h('td', { class: 'num', 'data-field': 'queued' }, fmt(value, 0)),
        h('td', { class: 'num' }, fmt(disp.get(k) || 0, 0)),
        reasons.map((r) => {
          const key = `${k} ${r}`, tot = ref.get(key) || 0, win = tot - (ref0.get(key) || 0);
          return h('td', { class: 'num' + (win > 0 ? ' bad' : '') }, `${fmt(tot, 0)}${win > 0 ? ` (+${fmt(win, 0)})` : ''}`);
        }));
    });
    const waitRows = [...waitB.keys()].sort().map((k) => h('tr', {}, h('td', {}, k.replace('\u0000', ' / ')),
      h('td', { class: 'num' }, fmtMs(quantile(0.5, waitB.get(k), waitB0.get(k)))),
      h('td', { class: 'num' }, fmtMs(quantile(0.99, waitB.get(k), waitB0.get(k))))));
    parts.push(h('table', {}, h('thead', {}, h('tr', {}, h('th', {}, 'pool'), h('th', { class: 'l' }, 'band'), h('th', {}, 'queued'), h('th', {}, 'dispatched'),
      reasons.map((r) => h('th', {}, `refused: ${r}`)))), h('tbody', {}, rows)));
    if (waitRows.length) {
      parts.push(h('h3', {}, 'Queue wait over the window'), h('table', {}, h('thead', {}, h('tr', {}, h('th', {}, 'pool'), h('th', {}, 'p50'), h('th', {}, 'p99'))), h('tbody', {}, waitRows)));
    }
  }
  // The gateway's own refusals (4xx/5xx it answered itself), with their reason when labelled.
  const rej = series(last.m, 'switchboard_rejected_total');
  if (rej.length) {
    parts.push(h('h3', {}, 'Answered by the gateway itself'), h('table', {}, h('tbody', {}, rej.map(({ labels, value }) =>
      h('tr', {}, h('td', {}, Object.entries(labels).map(([k, v]) => `${k}=${v}`).join(' ')), h('td', { class: 'num' }, fmt(value, 0)))))));
  }
  replace('flow-body', parts);
}

// /debug/decisions in either shape: the ring of recent decisions by request id
// ({id, at_ms, pool: "<name>", picked: "<address>", candidates: [{endpoint: "<address>"}]}),
// or the older last-decision-per-pool ({pool: <index>, picked: <index>, candidates:
// [{endpoint: <index>, address}]}). Normalised to the first.
function normaliseDecision(d) {
  const pools = (state.endpoints && state.endpoints.pools) || [];
  const poolName = typeof d.pool === 'number' ? (pools[d.pool] ? pools[d.pool].pool : `#${d.pool}`) : d.pool;
  const cands = (d.candidates || []).map((c) => ({
    ...c, endpoint: typeof c.endpoint === 'number' || c.endpoint === undefined ? (c.address ?? `#${c.endpoint}`) : c.endpoint,
  }));
  let picked = d.picked;
  if (typeof picked === 'number') picked = picked >= 0 && cands[picked] ? cands[picked].endpoint : null;
  return { ...d, pool: poolName, picked, candidates: cands, key: d.id || `${poolName}:${picked}:${JSON.stringify(cands.map((c) => c.total))}` };
}

function renderDecisions() {
  if (showFailure('decisions-body', 'decisions')) return;
  const data = state.decisions;
  if (!data) { replace('decisions-body', h('p', { class: 'dim' }, '/debug/decisions is off (debug_endpoints: false)')); return; }
  if (data.capacity === 0) {
    replace('decisions-body', h('p', { class: 'dim', 'data-off': 'decisions' }, 'decisions are off: the gateway keeps none (admin.decisions: 0)'));
    return;
  }
  const list = (data.decisions || []).map(normaliseDecision);
  list.sort((a, b) => (b.at_ms || 0) - (a.at_ms || 0));
  if (!list.length) { replace('decisions-body', h('p', { class: 'dim' }, 'no decision yet: send a request')); return; }
  const rows = list.map((d) => h('tr', {
    class: 'click' + (state.selected && state.selected.key === d.key ? ' sel' : ''), 'data-decision': d.id || d.key,
    onclick: () => { state.selected = d; renderDecisions(); },
  },
  h('td', {}, d.at_ms ? new Date(d.at_ms).toLocaleTimeString() : 'last'),
  h('td', { class: 'l' }, d.id || '—'), h('td', { class: 'l' }, d.pool), h('td', { class: 'l' }, d.model || ''),
  h('td', { class: 'l' }, d.picked || '—'),
  h('td', { class: 'l' }, d.outcome ? `${d.outcome.status}${d.outcome.ttft_ms !== undefined ? ` · ${fmt(d.outcome.ttft_ms, 1)} ms` : ''}` : '')));
  replace('decisions-body', h('table', {}, h('thead', {}, h('tr', {}, ['at', 'request id', 'pool', 'model', 'picked', 'outcome'].map((t) => h('th', { class: 'l' }, t)))),
    h('tbody', {}, rows)));
  renderDecisionDetail();
}

function renderDecisionDetail() {
  const d = state.selected;
  const el = document.getElementById('decision-detail');
  if (!d) { el.hidden = true; return; }
  el.hidden = false;
  const scorers = [...new Set(d.candidates.flatMap((c) => Object.keys(c.scores || {})))];
  const rows = d.candidates.map((c) => h('tr', { class: c.endpoint === d.picked ? 'sel' : '', 'data-candidate': c.endpoint },
    h('td', {}, c.endpoint, c.endpoint === d.picked ? ' ' : null, c.endpoint === d.picked ? badge('picked', 'ok') : null),
    h('td', { class: 'num', 'data-field': 'total' }, c.removed_by ? '—' : fmt(c.total, 3)),
    scorers.map((sc) => h('td', { class: 'num', 'data-scorer': sc }, c.scores && sc in c.scores ? fmt(c.scores[sc], 3) : '—')),
    h('td', { class: 'l' }, c.prefix ? `${c.prefix.blocks} blocks (${c.prefix.source})` : ''),
    h('td', { class: 'l' }, [c.removed_by ? badge('removed by ' + c.removed_by, 'bad') : null, c.stale ? badge('stale', 'warn') : null])));
  el.replaceChildren(...[
    h('div', {}, h('strong', {}, 'Decision ', d.id || ''), ' ', h('button', { type: 'button', onclick: () => { state.selected = null; renderDecisions(); } }, 'close')),
    h('p', {}, `pool ${d.pool}${d.model ? ' · model ' + d.model : ''} · profile ${d.profile} · picker ${d.picker} · ${d.reason}`),
    d.outcome ? h('p', {}, `outcome: status ${d.outcome.status}, served by ${d.outcome.served_by ?? '—'}, ${d.outcome.attempts ?? 1} attempt(s), TTFT ${fmt(d.outcome.ttft_ms, 1)} ms`) : null,
    h('table', { class: 'scores' }, h('thead', {}, h('tr', {}, h('th', {}, 'candidate'), h('th', {}, 'total'), scorers.map((sc) => h('th', {}, sc)), h('th', { class: 'l' }, 'prefix'), h('th', { class: 'l' }, ''))),
      h('tbody', {}, rows)),
  ].filter(Boolean));
}

// ---- wiring --------------------------------------------------------------------------------

document.addEventListener('DOMContentLoaded', () => {
  document.getElementById('login-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const tok = document.getElementById('token').value.trim();
    if (!tok) return;
    sessionStorage.setItem(TOKEN_KEY, tok);
    document.getElementById('login').hidden = true;
    document.getElementById('forget').hidden = false;
    state.needToken = false;
    setStatus('connecting…');
    poll();
  });
  document.getElementById('forget').addEventListener('click', () => {
    sessionStorage.removeItem(TOKEN_KEY);
    askToken(null);
  });
  if (sessionStorage.getItem(TOKEN_KEY)) document.getElementById('forget').hidden = false;
  const pause = document.getElementById('pause');
  pause.addEventListener('click', () => {
    state.paused = !state.paused;
    pause.textContent = state.paused ? 'resume' : 'pause';
    setStatus(state.paused ? 'paused' : 'live', state.paused ? '' : 'ok');
  });
  document.getElementById('window').addEventListener('change', render);
  poll();
  setInterval(poll, POLL_MS);
});
