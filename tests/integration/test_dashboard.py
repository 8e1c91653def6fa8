"""The dashboard on the admin listener (GET /, /ui/...): how its files are served (raw sockets:
content types, ETag and 304, HEAD, no-cache, 404/405/400, the token rules), and the page itself
in Debian's chromium driven by playwright-core (tests/browser/dashboard.js) in front of two
simulated pools: it loads without console errors or failed requests, shows every endpoint, its
numbers change when the test applies load between two reads, a decision opens with its scores,
and with admin.token set it asks for the token, refuses a wrong one and works with the right one.

The browser run needs /usr/bin/chromium and tests/browser/node_modules (scripts/deps.sh test
installs both). Missing, the browser tests FAIL with the command that fixes it: a dashboard
test that passes without a browser would prove nothing."""
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import unittest

from fixtures import ROOT, Gateway, http, read_response, send_request
from test_sim import MODEL, Sim, chat

BROWSER_DIR = os.path.join(ROOT, "tests", "browser")
CHROMIUM = os.environ.get("SB_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = os.path.join(ROOT, "build", "artifacts")
QWEN = "qwen-test"
TOKEN = "dash-s3cret"


def browser_missing():
    """Why the browser test cannot run here, with the fix, or None."""
    if not shutil.which("node"):
        return "node is not installed: run scripts/deps.sh test (or apt-get install -y nodejs npm)"
    if not os.access(CHROMIUM, os.X_OK):
        return "%s is missing: run scripts/deps.sh test (or apt-get install -y chromium)" % CHROMIUM
    if not os.path.isdir(os.path.join(BROWSER_DIR, "node_modules", "playwright-core")):
        return "tests/browser/node_modules is missing: run (cd tests/browser && npm ci) or scripts/deps.sh test"
    return None


def fleet(admin=""):
    """Two pools of simulated replicas (three of MODEL, one of QWEN) behind a gateway with flow
    control, the adaptive loop on the first pool and scoring profiles (so decisions carry
    scores), as the demo runs."""
    llama = Sim("--speed", "20", replicas=3)
    qwen = Sim("--speed", "20", "--model", QWEN)
    try:
        gw = Gateway([{"name": "llama", "models": [MODEL], "profile": "default",
                       "endpoints": ["127.0.0.1:%d" % p for p in llama.ports],
                       "yaml": ["adaptive: true", "probe: { interval_ms: 200 }"]},
                      {"name": "qwen", "models": [QWEN], "profile": "default",
                       "endpoints": ["127.0.0.1:%d" % qwen.port], "yaml": ["probe: { interval_ms: 200 }"]}],
                     extra="flow_control:\n  max_wait_ms: { standard: 30000 }\n", admin=admin)
    except BaseException:
        llama.stop()
        qwen.stop()
        raise
    return llama, qwen, gw


def load(gw, n=24):
    """n chat requests over both pools at once, half of them streamed; all must succeed."""
    bad = []

    def one(i):
        body = chat("dashboard load %d %s" % (i % 4, "word " * 200), max_tokens=8, stream=bool(i % 2),
                    usage=bool(i % 2), model=MODEL if i % 3 else QWEN)
        st, _, _ = http(gw.port, "POST", "/v1/chat/completions", body, timeout=60)
        if st != 200:
            bad.append(st)

    ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return bad


def run_browser(opts, on_load):
    """Runs tests/browser/dashboard.js with opts; calls on_load() when it asks for load.
    Returns its JSON report."""
    # stderr to a file: a chatty browser cannot fill a pipe nobody reads until the end.
    errf = tempfile.TemporaryFile("w+")
    proc = subprocess.Popen(["node", os.path.join(BROWSER_DIR, "dashboard.js"), json.dumps(opts)], cwd=BROWSER_DIR,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errf, text=True)
    # The overall bound: a hung browser fails the test instead of stalling the run.
    timer = threading.Timer(180, proc.kill)
    timer.start()
    try:
        report = None
        # Read to the report, not to EOF: the browser's helper processes inherit the pipe and
        # may hold it open after node is done.
        for line in proc.stdout:
            if line.strip() == "LOAD":
                on_load()
                proc.stdin.write("go\n")
                proc.stdin.close()  # node's stdin would keep it alive past its report
            elif line.startswith("{"):
                report = json.loads(line)
                break
        proc.wait()
        errf.seek(0)
        err = errf.read()
    finally:
        timer.cancel()
        errf.close()
        proc.stdout.close()
    if report is None:
        raise AssertionError("dashboard.js gave no report (exit %s):\n%s" % (proc.returncode, err))
    if proc.returncode != 0:
        raise AssertionError("dashboard.js exit %s (killed: over its time bound?):\n%s" % (proc.returncode, err))
    return report


class DashboardFilesTest(unittest.TestCase):
    """The static files' serving rules, with and without a token, on raw sockets."""

    @classmethod
    def setUpClass(cls):
        cls.up = Sim("--speed", "20")
        cls.gw = Gateway([{"name": "p", "models": [MODEL], "endpoints": ["127.0.0.1:%d" % cls.up.port]}],
                         admin="token: %s" % TOKEN)

    @classmethod
    def tearDownClass(cls):
        try:
            cls.gw.close()
        finally:
            cls.up.stop()

    def test_files_are_served_with_types_tags_and_no_cache(self):
        want = {"/": "text/html", "/ui/app.js": "text/javascript", "/ui/app.css": "text/css"}
        for path, ctype in want.items():
            st, hd, body = http(self.gw.admin_port, "GET", path)
            self.assertEqual(st, 200, path)
            self.assertTrue(hd["content-type"].startswith(ctype), hd)
            self.assertEqual(hd["cache-control"], "no-cache")
            self.assertEqual(hd["x-content-type-options"], "nosniff")
            self.assertIn("default-src 'self'", hd["content-security-policy"])
            self.assertRegex(hd["etag"], r'^"[0-9a-f]{16}"$')
            self.assertEqual(int(hd["content-length"]), len(body))
            # The bytes are the files in src/ui/ (compiled in, not read at run time).
            with open(os.path.join(ROOT, "src", "ui", "index.html" if path == "/" else path[4:]), "rb") as f:
                self.assertEqual(body, f.read(), path)
            # A browser revalidating its copy gets 304 without the body, also in a list or weak.
            for inm in (hd["etag"], 'W/"0000000000000000", ' + hd["etag"], "*"):
                # (Connection: close: a 304 has no body and no length, so the reader waits for the close.)
                st2, hd2, body2 = http(self.gw.admin_port, "GET", path, headers={"If-None-Match": inm, "Connection": "close"})
                self.assertEqual((st2, body2), (304, b""), inm)
                self.assertEqual(hd2["etag"], hd["etag"])
            st3, _, body3 = http(self.gw.admin_port, "GET", path, headers={"If-None-Match": '"0000000000000000"'})
            self.assertEqual((st3, len(body3)), (200, len(body)))
        # The page links exactly the files that are served.
        _, _, html = http(self.gw.admin_port, "GET", "/")
        self.assertIn(b'src="/ui/app.js"', html)
        self.assertIn(b'href="/ui/app.css"', html)

    def test_head_answers_the_length_without_the_body(self):
        _, ghd, gbody = http(self.gw.admin_port, "GET", "/ui/app.js")
        s = socket.create_connection(("127.0.0.1", self.gw.admin_port), timeout=10)
        try:
            send_request(s, "HEAD", "/ui/app.js")
            s.settimeout(10)
            buf = b""
            while b"\r\n\r\n" not in buf:
                chunk = s.recv(65536)
                if not chunk:
                    break
                buf += chunk
            head, rest = buf.split(b"\r\n\r\n", 1)
            self.assertTrue(head.startswith(b"HTTP/1.1 200"), head)
            self.assertIn(b"Content-Length: %d" % len(gbody), head)
            self.assertIn(("ETag: %s" % ghd["etag"]).encode(), head)
            # Nothing follows the head: the connection stays usable for the next request.
            self.assertEqual(rest, b"")
            send_request(s, "GET", "/ui/app.css")
            st, _, _ = read_response(s)
            self.assertEqual(st, 200)
        finally:
            s.close()

    def test_unknown_files_methods_and_bodies(self):
        # Under /ui/ an unknown file is 404 without the token (the list is public, like the binary).
        for path in ("/ui/nope.js", "/ui/", "/ui/../metrics", "/ui/app.js/x"):
            st, _, body = http(self.gw.admin_port, "GET", path)
            self.assertEqual(st, 404, path)
            self.assertEqual(json.loads(body)["error"]["code"], "not_found")
        # Anything else stays behind the token, unknown paths included.
        for path in ("/index.html", "/uix", "/debug/endpoints", "/debug/decisions", "/debug/adaptive"):
            st, hd, _ = http(self.gw.admin_port, "GET", path)
            self.assertEqual(st, 401, path)
            self.assertIn("Bearer", hd["www-authenticate"])
        st, _, _ = http(self.gw.admin_port, "GET", "/debug/endpoints", headers={"Authorization": "Bearer " + TOKEN})
        self.assertEqual(st, 200)
        # /metrics and /healthz keep their own rules (open unless admin.metrics_auth).
        self.assertEqual(http(self.gw.admin_port, "GET", "/metrics")[0], 200)
        self.assertEqual(http(self.gw.admin_port, "GET", "/healthz")[0], 200)
        # Only GET and HEAD; no body.
        st, hd, _ = http(self.gw.admin_port, "POST", "/", body=b"")
        self.assertEqual(st, 405)
        self.assertEqual(hd["allow"], "GET, HEAD")
        st, _, body = http(self.gw.admin_port, "GET", "/ui/app.js", body=b"x" * 10)
        self.assertEqual(st, 400)
        self.assertEqual(json.loads(body)["error"]["code"], "body_not_allowed")
        # A query string does not change what is served (the page is loaded as /?x sometimes).
        st, _, body = http(self.gw.admin_port, "GET", "/?tab=decisions")
        self.assertEqual(st, 200)
        self.assertIn(b"<title>switchboard</title>", body)


class DashboardBrowserTest(unittest.TestCase):
    """The page in a real browser, against a live fleet."""

    def setUp(self):
        why = browser_missing()
        if why:
            self.fail("the dashboard's browser test cannot run: " + why)
        os.makedirs(ARTIFACTS, exist_ok=True)

    def check_report(self, rep, llama, qwen, decisions=True):
        self.assertNotIn("exception", rep, rep.get("exception"))
        self.assertEqual(rep["errors"], [], "console errors")
        self.assertEqual(rep["failed"], [], "failed requests")
        want = ["127.0.0.1:%d" % p for p in llama.ports + qwen.ports]
        self.assertEqual(sorted(rep["shown"]), sorted(want))
        before = sum(e["dispatched"] for e in rep["before"]["endpoints"].values())
        after = sum(e["dispatched"] for e in rep["after"]["endpoints"].values())
        self.assertGreater(after, before)
        # Both pools' traffic rows counted the load in the window, with a rate and a TTFT.
        # Rows are keyed "pool" or "pool/model" (when the series carry a model label).
        for pool in ("llama", "qwen"):
            keys = [k for k in rep["after"]["traffic"] if k.split("/")[0] == pool]
            self.assertEqual(len(keys), 1, rep["after"]["traffic"])
            t = rep["after"]["traffic"][keys[0]]
            self.assertGreater(t["requests"], rep["before"]["traffic"].get(keys[0], {}).get("requests", 0), pool)
            self.assertNotEqual(t["rate"], "—", pool)
            self.assertTrue(t["ttft"].endswith("ms") or t["ttft"].endswith(" s"), t)
        if decisions:
            dec = rep["decision"]
            # The default profile's scorers, each with a number per candidate.
            for scorer in ("prefix", "queue", "kv-cache"):
                self.assertIn(scorer, dec["scorers"])
            self.assertGreaterEqual(dec["candidates"], 1)
            self.assertTrue(dec["scores"] and all(s == "—" or float(s) >= 0 for s in dec["scores"]), dec)
            self.assertTrue(any(s != "—" for s in dec["scores"]), dec)
            self.assertIn(dec["picked"], want)
        self.assertGreater(rep["charts"], 0, "the adaptive loop's charts")
        u = rep["units"]
        # Prometheus text: escaped label values, exponents, junk lines skipped.
        self.assertEqual(u["labels"], [{"pool": 'a"b', "model": "m"}, {"pool": "c"}])
        self.assertEqual(u["values"], [3, 40])
        # Quantiles interpolate inside the bucket (as histogram_quantile), over the window only,
        # none without observations, and the highest finite bound for the +Inf bucket.
        self.assertAlmostEqual(u["p50"], 0.2)
        self.assertAlmostEqual(u["p50window"], 0.3)
        self.assertIsNone(u["none"])
        self.assertEqual(u["inf"], 1)
        # '+Inf' sorts last wherever it sits in the scrape (parseFloat('+Inf') is NaN: once it
        # sorted first and the median came out as 0).
        self.assertAlmostEqual(u["infFirst"], 0.5)
        # A restart is a new process_start_time_seconds: counter and adaptive history start
        # again even when the new process has already counted more; a reload lowering the
        # counters (a pool dropped) is not one.
        self.assertEqual(u["restart"]["newProcess"], {"scrapes": 1, "adaptivePools": 0})
        self.assertEqual(u["restart"]["sameProcess"], {"scrapes": 2, "adaptivePools": 1})
        # Decisions in the old shape (indexes) and the new (request id, addresses).
        self.assertEqual((u["oldPicked"], u["oldEndpoints"]), ("y:2", ["x:1", "y:2"]))
        self.assertEqual((u["newPicked"], u["newKey"]), ("y:2", "r1"))

    def test_page_shows_the_fleet_and_follows_load(self):
        llama, qwen, gw = fleet()
        shot = os.path.join(ARTIFACTS, "dashboard.png")
        try:
            bad = []
            rep = run_browser({"url": "http://127.0.0.1:%d/" % gw.admin_port, "screenshot": shot,
                               "endpoints": ["127.0.0.1:%d" % p for p in llama.ports + qwen.ports]},
                              lambda: bad.extend(load(gw)))
            self.assertEqual(bad, [])
            self.check_report(rep, llama, qwen)
            with open(shot, "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        finally:
            try:
                gw.close()
            finally:
                llama.stop()
                qwen.stop()

    def test_decisions_off(self):
        """admin.decisions: 0 (no ring). The page asks /debug/decisions?limit=50 as always: the
        gateway clamps the limit rather than refusing it, and one section's trouble never blanks
        the others. Everything draws; the decisions section says they are off."""
        llama, qwen, gw = fleet(admin="decisions: 0")
        try:
            bad = []
            rep = run_browser({"url": "http://127.0.0.1:%d/" % gw.admin_port, "decisionsOff": True,
                               "screenshot": os.path.join(ARTIFACTS, "dashboard-decisions-off.png"),
                               "endpoints": ["127.0.0.1:%d" % p for p in llama.ports + qwen.ports]},
                              lambda: bad.extend(load(gw)))
            self.assertEqual(bad, [])
            self.check_report(rep, llama, qwen, decisions=False)
            self.assertIn("admin.decisions: 0", rep["decisionsText"])
        finally:
            try:
                gw.close()
            finally:
                llama.stop()
                qwen.stop()

    def test_one_failing_page_blanks_nothing_else(self):
        """/debug/decisions answers 500 (the browser is made to see it so): once, the page's
        Promise.all rejected and nothing at all was drawn. Every other section draws and follows
        load; the decisions section says its read failed and why."""
        llama, qwen, gw = fleet()
        try:
            bad = []
            rep = run_browser({"url": "http://127.0.0.1:%d/" % gw.admin_port, "failPath": "/debug/decisions",
                               "endpoints": ["127.0.0.1:%d" % p for p in llama.ports + qwen.ports]},
                              lambda: bad.extend(load(gw)))
            self.assertEqual(bad, [])
            self.check_report(rep, llama, qwen, decisions=False)
            self.assertGreater(rep.get("injected", 0), 0)
            self.assertEqual([f["page"] for f in rep["failedSections"]], ["decisions"], rep["failedSections"])
            self.assertIn("HTTP 500", rep["failedSections"][0]["text"])
        finally:
            try:
                gw.close()
            finally:
                llama.stop()
                qwen.stop()

    def test_token_prompt(self):
        llama, qwen, gw = fleet(admin="token: %s, metrics_auth: true" % TOKEN)
        try:
            bad = []
            rep = run_browser({"url": "http://127.0.0.1:%d/" % gw.admin_port, "token": TOKEN,
                               "screenshot": os.path.join(ARTIFACTS, "dashboard-token.png"),
                               "endpoints": ["127.0.0.1:%d" % p for p in llama.ports + qwen.ports]},
                              lambda: bad.extend(load(gw)))
            self.assertEqual(bad, [])
            self.assertNotIn("exception", rep, rep.get("exception"))
            self.assertEqual(rep["steps"][:3], ["asked for the token", "refused a wrong token", "accepted the token"])
            self.assertIn("refused", rep["refusedText"])
            # The page learned of the token from 401s (before it was given), never after.
            self.assertGreater(rep.get("unauthorized", 0), 0)
            self.check_report(rep, llama, qwen)
        finally:
            try:
                gw.close()
            finally:
                llama.stop()
                qwen.stop()


if __name__ == "__main__":
    unittest.main()
