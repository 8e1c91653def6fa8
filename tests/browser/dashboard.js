// Drives Debian's chromium (headless, through playwright-core) against the dashboard and
// reports what a person would see, as one JSON line on stdout; tests/integration/
// test_dashboard.py decides pass or fail from it.
//
// Usage: node dashboard.js '<json options>'
//   url          the admin listener's dashboard (http://127.0.0.1:PORT/)
//   endpoints    every endpoint address the page must show
//   token        admin.token when the gateway has one: the page must ask for it (a wrong
//                one first, which must be refused)
//   screenshot   where to save a PNG of the whole page
//   chromium     the browser binary (default /usr/bin/chromium)
//   decisionsOff the gateway keeps no decisions (admin.decisions: 0): instead of opening one,
//                read what the decisions section says
//   failPath     a data page (e.g. /debug/decisions) answered 500 by the browser itself: the
//                other sections must draw, and the page's section must say what failed
// Between the two reads of the numbers it prints "LOAD" and waits for a line on stdin: the
// test applies load then, so the page's numbers must change by themselves (polling).
'use strict';

const readline = require('readline');
const { chromium } = require('playwright-core');

const opts = JSON.parse(process.argv[2] || '{}');
const TIMEOUT = 20000;

function stdinLine() {
  const rl = readline.createInterface({ input: process.stdin });
  // Closed and unreferenced after the line: an open stdin would keep node from exiting.
  return new Promise((resolve) => rl.once('line', (l) => { rl.close(); process.stdin.destroy(); resolve(l); }));
}

async function numbers(page) {
  return page.evaluate(() => {
    const num = (el) => (el ? parseFloat(el.textContent) : NaN);
    const out = { endpoints: {}, traffic: {} };
    for (const tr of document.querySelectorAll('#pools-body tr[data-endpoint]')) {
      out.endpoints[tr.dataset.endpoint] = {
        dispatched: num(tr.querySelector('[data-field=dispatched]')),
        waiting: tr.querySelector('[data-field=waiting]').textContent,
      };
    }
    for (const tr of document.querySelectorAll('#traffic-body tr[data-group]')) {
      out.traffic[tr.dataset.group] = {
        requests: num(tr.querySelector('[data-field=requests]')),
        rate: tr.querySelector('[data-field=rate]').textContent,
        ttft: tr.querySelector('[data-field=ttft-p50]').textContent,
      };
    }
    return out;
  });
}

async function main() {
  const result = { errors: [], failed: [], steps: [] };
  const browser = await chromium.launch({
    executablePath: opts.chromium || '/usr/bin/chromium',
    headless: true,
    // Chromium's sandbox needs user namespaces a root process in a container lacks.
    args: process.getuid && process.getuid() === 0 ? ['--no-sandbox'] : [],
  });
  try {
    const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    // Before the token is given, the page's own data requests answer 401 by design (that is
    // how it learns it needs one): those are recorded apart, not as failures.
    let loggedIn = !opts.token;
    const injected = (url) => opts.failPath && new URL(url).pathname === opts.failPath;
    if (opts.failPath) {
      await page.route((url) => url.pathname === opts.failPath,
        (route) => route.fulfill({ status: 500, contentType: 'application/json', body: '{"error":{"message":"injected"}}' }));
    }
    page.on('console', (m) => {
      if (m.type() !== 'error') return;
      if (!loggedIn && /401/.test(m.text())) return;
      if (m.location() && m.location().url && injected(m.location().url)) return; // the 500s asked for
      result.errors.push(m.text());
    });
    page.on('pageerror', (e) => result.errors.push('page error: ' + e.message));
    page.on('requestfailed', (r) => result.failed.push(`${r.method()} ${r.url()}: ${r.failure() && r.failure().errorText}`));
    page.on('response', (r) => {
      if (r.status() < 400) return;
      if (injected(r.url())) { result.injected = (result.injected || 0) + 1; return; }
      if (!loggedIn && r.status() === 401) { result.unauthorized = (result.unauthorized || 0) + 1; return; }
      result.failed.push(`${r.request().method()} ${r.url()}: HTTP ${r.status()}`);
    });

    const t0 = Date.now();
    await page.goto(opts.url, { waitUntil: 'load' });
    result.title = await page.title();

    if (opts.token) {
      await page.waitForSelector('#login:not([hidden])', { timeout: TIMEOUT });
      result.steps.push('asked for the token');
      await page.fill('#token', 'not-' + opts.token);
      await page.click('#login button[type=submit]');
      await page.waitForSelector('#login-error:not([hidden])', { timeout: TIMEOUT });
      result.refusedText = await page.textContent('#login-error');
      result.steps.push('refused a wrong token');
      await page.fill('#token', opts.token);
      loggedIn = true; // from here on, any 401 is a failure
      await page.click('#login button[type=submit]');
      await page.waitForSelector('#login', { state: 'hidden', timeout: TIMEOUT });
      result.steps.push('accepted the token');
    }

    for (const ep of opts.endpoints || []) {
      await page.waitForSelector(`#pools-body tr[data-endpoint="${ep}"]`, { timeout: TIMEOUT });
    }
    result.shown = await page.$$eval('#pools-body tr[data-endpoint]', (trs) => trs.map((t) => t.dataset.endpoint));
    result.steps.push('shows every endpoint');
    result.ms = { endpoints: Date.now() - t0 };
    // Two reads, so window rates exist before the load.
    await page.waitForFunction(() => !document.querySelector('#traffic-body p.dim') && document.querySelector('#traffic-body table'), null, { timeout: TIMEOUT });
    result.before = await numbers(page);

    process.stdout.write('LOAD\n');
    await stdinLine();
    const sum = (n) => Object.values(n.endpoints).reduce((a, e) => a + (e.dispatched || 0), 0);
    const before = sum(result.before);
    // Until every endpoint's and every traffic row's counts have moved past the first read's
    // (one poll may land while the last responses finish; the next one has them all).
    await page.waitForFunction(([b, tb]) => {
      let s = 0;
      for (const el of document.querySelectorAll('#pools-body [data-field=dispatched]')) s += parseFloat(el.textContent) || 0;
      const rows = [...document.querySelectorAll('#traffic-body tr[data-group]')];
      const moved = rows.length > 0 && rows.every((tr) => parseFloat(tr.querySelector('[data-field=requests]').textContent) >
        ((tb[tr.dataset.group] && tb[tr.dataset.group].requests) || 0));
      return s > b && moved;
    }, [before, result.before.traffic], { timeout: TIMEOUT });
    result.after = await numbers(page);
    result.steps.push('numbers changed under load');
    result.ms.load = Date.now() - t0;

    if (opts.failPath) {
      await page.waitForSelector('[data-failed]', { timeout: TIMEOUT });
      result.failedSections = await page.$$eval('[data-failed]', (els) => els.map((e) => ({ page: e.dataset.failed, text: e.textContent })));
      result.steps.push('says which section failed');
    } else if (opts.decisionsOff) {
      await page.waitForSelector('#decisions-body [data-off=decisions]', { timeout: TIMEOUT });
      result.decisionsText = await page.textContent('#decisions-body');
      result.steps.push('says decisions are off');
    } else {
      // Open a decision and read its scores.
      await page.waitForSelector('#decisions-body tr.click', { timeout: TIMEOUT });
      await page.click('#decisions-body tr.click');
      await page.waitForSelector('#decision-detail:not([hidden]) td[data-scorer]', { timeout: TIMEOUT });
      result.decision = await page.evaluate(() => {
        const det = document.getElementById('decision-detail');
        const scorers = [...det.querySelectorAll('thead th')].map((t) => t.textContent);
        const scores = [...det.querySelectorAll('td[data-scorer]')].map((t) => t.textContent);
        const picked = det.querySelector('tr.sel[data-candidate]');
        return { scorers, scores, candidates: det.querySelectorAll('tr[data-candidate]').length, picked: picked && picked.dataset.candidate, text: det.textContent };
      });
      result.steps.push('opened a decision');
      result.ms.decision = Date.now() - t0;
    }

    // The page's own arithmetic, on fixed inputs (its functions are the script's globals).
    result.units = await page.evaluate(() => {
      const m = parseProm('# HELP x y\nx_total{pool="a\\"b",model="m"} 3\nx_total{pool="c"} 4e1\nbad line\n');
      const b = (o) => new Map(Object.entries(o));
      const now = b({ '0.1': 0, '0.2': 10, '0.4': 20, '+Inf': 20 });
      const then = b({ '0.1': 0, '0.2': 10, '0.4': 10, '+Inf': 10 });
      const inf = b({ '1': 0, '+Inf': 5 });
      // +Inf first in the map (keys keep insertion order): sorted last all the same.
      const infFirst = new Map([['+Inf', 10], ['0.5', 5], ['1', 10]]);
      // Restarts, told by process_start_time_seconds; the page's own state is saved and put
      // back around the checks (this runs in one task: no poll lands in between).
      const saved = { scrapes: state.scrapes, hist: new Map(state.adaptiveHist) };
      const scrape = (start, count) => parseProm(`process_start_time_seconds ${start}\nswitchboard_request_duration_seconds_count{pool="p"} ${count}\n`, KEEP);
      const hist = () => { state.adaptiveHist.clear(); state.adaptiveHist.set('p', { samples: new Map([[1, {}]]), changes: new Map() }); };
      const restart = {};
      // A restarted gateway that already counted more than the old one: history starts again.
      state.scrapes = []; hist();
      keepScrape(1, scrape(1000.5, 10)); keepScrape(2, scrape(1009.25, 12));
      restart.newProcess = { scrapes: state.scrapes.length, adaptivePools: state.adaptiveHist.size };
      // A reload dropping a pool (counters lower, same process): history kept.
      state.scrapes = []; hist();
      keepScrape(1, scrape(1000.5, 10)); keepScrape(2, scrape(1000.5, 4));
      restart.sameProcess = { scrapes: state.scrapes.length, adaptivePools: state.adaptiveHist.size };
      state.scrapes = saved.scrapes;
      state.adaptiveHist.clear();
      for (const [k, v] of saved.hist) state.adaptiveHist.set(k, v);
      const oldShape = normaliseDecision({ pool: 0, picked: 1, profile: 'p', candidates: [{ endpoint: 0, address: 'x:1', total: 0.2 }, { endpoint: 1, address: 'y:2', total: 0.8 }] });
      const newShape = normaliseDecision({ id: 'r1', at_ms: 5, pool: 'llama', picked: 'y:2', candidates: [{ endpoint: 'y:2', total: 1, scores: { q: 1 } }] });
      return {
        labels: m.get('x_total').map((x) => x.labels), values: m.get('x_total').map((x) => x.value),
        p50: quantile(0.5, now, null), p50window: quantile(0.5, now, then), none: quantile(0.5, then, then), inf: quantile(0.9, inf, null),
        infFirst: quantile(0.5, infFirst, null), restart,
        oldPicked: oldShape.picked, oldEndpoints: oldShape.candidates.map((c) => c.endpoint), newPicked: newShape.picked, newKey: newShape.key,
      };
    });

    // The adaptive section drew its charts.
    result.charts = await page.$$eval('#adaptive-body svg.chart polyline', (p) => p.length);

    if (opts.screenshot) {
      // Let one more poll land so the picture shows live figures, then keep it.
      await page.waitForTimeout(1200);
      await page.screenshot({ path: opts.screenshot, fullPage: true });
      result.screenshot = opts.screenshot;
      result.ms.screenshot = Date.now() - t0;
    }
  } catch (e) {
    result.exception = String(e && e.stack || e);
  } finally {
    await browser.close();
  }
  process.stdout.write(JSON.stringify(result) + '\n');
}

main().catch((e) => { process.stdout.write(JSON.stringify({ exception: String(e && e.stack || e) }) + '\n'); process.exit(1); });
