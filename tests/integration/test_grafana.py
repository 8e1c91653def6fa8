"""deploy/grafana/switchboard.json is built only on metrics that exist (issue 16, item 6): every
metric name in every query (panels, template variables, annotations) is a sample name of a live
gateway's /metrics with every optional family turned on (flow control, adaptive routing, the
endpoint picker, KV-cache events and the precise index), histogram suffixes included, and every
label a selector matches on is one that metric carries. The same page passes promtool."""
import json
import os
import re
import unittest

from fixtures import ROOT, Gateway, free_port, free_run, http
from test_sim import MODEL, PROMTOOL, Sim, chat, metrics, promtool_problems

DASHBOARD = os.path.join(ROOT, "deploy", "grafana", "switchboard.json")

KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool",
            "offset", "inf", "nan"}
SELECTOR = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)\s*\{([^}]*)\}")


def metric_names(expr):
    """The metric names a PromQL expression reads: identifiers that are not functions (followed
    by '('), keywords, label names of by/without/on/ignoring lists, matchers, ranges, numbers,
    strings or Grafana variables. label_values(metric, label) reads `metric`."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    e = re.sub(r"label_values\(\s*([A-Za-z_:][A-Za-z0-9_:]*)\s*(\{[^}]*\})?\s*,\s*\w+\s*\)", r"\1\2", e)
    e = re.sub(r"\{[^}]*\}", " ", e)
    e = re.sub(r"\[[^\]]*\]", " ", e)
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    e = re.sub(r"\$\{?\w+\}?", " ", e)
    e = re.sub(r"(?<![A-Za-z0-9_:])\d+(\.\d+)?([eE][+-]?\d+)?", " ", e)
    out = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", e):
        if e[m.end():].lstrip().startswith("(") or m.group(0).lower() in KEYWORDS:
            continue
        out.add(m.group(0))
    return out


def matcher_labels(expr):
    """(metric, label) for every label a selector matches on."""
    e = re.sub(r"label_values\(\s*([A-Za-z_:][A-Za-z0-9_:]*\s*(\{[^}]*\})?)\s*,\s*\w+\s*\)", r"\1", expr)
    for m in SELECTOR.finditer(e):
        for label in re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", m.group(2)):
            yield m.group(1), label


def queries(dash):
    """Every PromQL expression of the dashboard, with where it is."""
    def walk(panels):
        for p in panels:
            yield from walk(p.get("panels", []))
            for t in p.get("targets", []):
                if t.get("expr"):
                    yield "panel %r" % p.get("title"), t["expr"]
    yield from walk(dash["panels"])
    for v in dash["templating"]["list"]:
        if v["type"] == "query":
            q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            yield "variable %s" % v["name"], q
    for a in dash.get("annotations", {}).get("list", []):
        if a.get("expr"):
            yield "annotation %r" % a["name"], a["expr"]


class ExtractorTest(unittest.TestCase):
    def test_names_not_functions_labels_or_numbers(self):
        self.assertEqual(metric_names('histogram_quantile(0.99, sum by (le, pool) (rate(a_bucket{x="b{c}"}[5m])))'),
                         {"a_bucket"})
        self.assertEqual(metric_names("sum(rate(a_total[$__rate_interval])) / ignoring(x) b_total > 1e3"),
                         {"a_total", "b_total"})
        self.assertEqual(metric_names("time() - c_seconds and on (instance, job) d_info"), {"c_seconds", "d_info"})
        self.assertEqual(metric_names('label_values(e_total{pool=~"$pool"}, model)'), {"e_total"})
        self.assertEqual(list(matcher_labels('label_values(e_total{pool=~"$pool"}, model)')), [("e_total", "pool")])


class GrafanaDashboardTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.sim = Sim("--adapters", "lora-a", "--speed", "50", replicas=2)
        kv = free_run(2)  # nothing publishes there: the subscribers' families show all the same
        eps = ["127.0.0.1:%d" % p for p in cls.sim.ports]
        cls.gw = Gateway([
            {"name": "p", "models": [MODEL], "adapters": ["lora-a"], "profile": "default", "endpoints": eps,
             "yaml": ["adaptive: true", 'kv_events: { endpoint: "tcp://{host}:{port%+d}" }' % (kv - cls.sim.ports[0])]},
        ], extra='ext_proc: { listen: "127.0.0.1:%d" }\ntokenize: { wait_ms: 20 }' % free_port())
        for model, stream in ((MODEL, False), (MODEL, True), ("lora-a", True)):
            st, _, body = http(cls.gw.port, "POST", "/v1/chat/completions",
                               chat("hello", model=model, stream=stream, usage=stream))
            assert st == 200, body
        http(cls.gw.port, "POST", "/v1/chat/completions", chat("x", model="nope"))
        cls.text = metrics(cls.gw.admin_port)
        with open(DASHBOARD) as f:
            cls.dash = json.load(f)

    @classmethod
    def tearDownClass(cls):
        try:
            cls.gw.close()
        finally:
            cls.sim.stop()

    def samples(self):
        """{sample name: set of label names} of the live page."""
        out = {}
        for line in self.text.splitlines():
            m = re.match(r"([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})? \S+$", line)
            if m:
                out.setdefault(m.group(1), set()).update(re.findall(r'(\w+)="', m.group(2) or ""))
        return out

    def test_every_query_reads_metrics_that_exist(self):
        samples = self.samples()
        types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", self.text, re.M))
        used, problems = set(), []
        for where, expr in queries(self.dash):
            names = metric_names(expr)
            if not names:
                problems.append("%s: no metric in %r" % (where, expr))
            for n in names:
                used.add(n)
                if n not in samples:
                    problems.append("%s: %s is not on /metrics (%r)" % (where, n, expr))
                for suffix in ("_bucket", "_sum", "_count"):
                    # A suffix is a histogram's only where the family says so.
                    if n.endswith(suffix) and n not in types and types.get(n[: -len(suffix)]) != "histogram":
                        problems.append("%s: %s is no histogram's %s" % (where, n, suffix))
            for metric, label in matcher_labels(expr):
                if metric in samples and label not in samples[metric]:
                    problems.append("%s: %s has no label %s" % (where, metric, label))
        self.assertEqual(problems, [])
        # The dashboard covers what it promises: traffic, TTFT/ITL/e2e, queue, endpoints,
        # prefix hit ratio, adaptive, process.
        for n in ("switchboard_requests_total", "switchboard_time_to_first_token_seconds_bucket",
                  "switchboard_inter_token_latency_seconds_bucket", "switchboard_request_duration_seconds_bucket",
                  "switchboard_queue_wait_seconds_bucket", "switchboard_queue_length", "switchboard_rejected_total",
                  "switchboard_endpoint_waiting", "switchboard_endpoint_running", "switchboard_endpoint_kv_cache_usage",
                  "switchboard_endpoint_in_flight", "switchboard_endpoint_stale", "switchboard_cached_tokens_total",
                  "switchboard_prompt_tokens_total", "switchboard_adaptive_signal", "process_resident_memory_bytes",
                  "process_cpu_seconds_total", "process_open_fds"):
            self.assertIn(n, used)

    def test_dashboard_shape(self):
        d = self.dash
        self.assertGreaterEqual(d["schemaVersion"], 36)
        variables = {v["name"]: v for v in d["templating"]["list"]}
        self.assertEqual(variables["datasource"]["type"], "datasource")
        self.assertEqual(variables["datasource"]["query"], "prometheus")
        for name in ("pool", "model"):
            self.assertEqual(variables[name]["type"], "query")
        ids = [p["id"] for p in d["panels"]]
        self.assertEqual(len(ids), len(set(ids)))
        for p in d["panels"]:
            if p["type"] == "row":
                continue
            self.assertEqual(p["datasource"]["uid"], "${datasource}", p["title"])
            self.assertTrue(p["targets"], p["title"])
            for t in p["targets"]:
                self.assertEqual(t["datasource"]["uid"], "${datasource}", p["title"])
            g = p["gridPos"]
            self.assertLessEqual(g["x"] + g["w"], 24, p["title"])
        # Panels filtered by model use the variable on a series that has the label.
        self.assertTrue(any('model=~"$model"' in e for _, e in queries(d)))

    @unittest.skipUnless(PROMTOOL, "promtool is needed (scripts/deps.sh test installs prometheus)")
    def test_full_page_passes_promtool(self):
        for family in ("switchboard_adaptive_signal", "switchboard_queue_length", "switchboard_extproc_streams_total",
                       "switchboard_kv_events_messages_total", "switchboard_kv_index_blocks",
                       "switchboard_tokenize_requests_total", "switchboard_build_info", "process_open_fds"):
            self.assertIn("# TYPE %s " % family, self.text)
        self.assertEqual(promtool_problems(self.text), [])


if __name__ == "__main__":
    unittest.main()
