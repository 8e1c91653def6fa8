"""Metrics that say which model, why a request was refused, which build runs, what the process
costs and whether reloads worked (issue 16, item 3): the `model` label on request-level series,
bounded by metrics.max_models; switchboard_rejected_total's reason; switchboard_build_info and
`switchboard --version`; process_*; switchboard_reloads_total and the last reload's time;
switchboard_open_connections per listener, ext_proc included. promtool checks the whole page."""
import os
import re
import signal
import subprocess
import time
import unittest

from fixtures import GATEWAY_BIN, ROOT, Gateway, free_port, http, wait_until
from test_sim import MODEL, PROMTOOL, Sim, chat, metric, metrics, promtool_problems


def labels_of(text, name):
    """The label dicts of every sample of `name`."""
    out = []
    for line in text.splitlines():
        m = re.match(r"([^{ ]+)\{(.*)\} \S+$", line)
        if m and m.group(1) == name:
            out.append(dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2))))
    return out


class ModelLabelTest(unittest.TestCase):
    """A pool with an alias and three adapters, two of which fit under max_models 3."""

    @classmethod
    def setUpClass(cls):
        cls.sim = Sim("--adapters", "lora-a,lora-b,lora-c", "--max-loras", "3", "--speed", "50")
        cls.ext_port = free_port()
        cls.gw = Gateway([{"name": "p", "models": [MODEL, "alias-m"], "adapters": ["lora-a", "lora-b", "lora-c"],
                           "endpoints": ["127.0.0.1:%d" % cls.sim.port]}],
                         extra='metrics: { max_models: 3 }\next_proc: { listen: "127.0.0.1:%d" }' % cls.ext_port)

    @classmethod
    def tearDownClass(cls):
        try:
            cls.gw.close()
        finally:
            cls.sim.stop()

    def test_model_label_is_served_name_adapter_or_other(self):
        before = metrics(self.gw.admin_port)
        asked = {MODEL: 2, "alias-m": 1, "lora-a": 2, "lora-c": 3}
        for model, n in asked.items():
            for i in range(n):
                st, _, body = http(self.gw.port, "POST", "/v1/chat/completions",
                                   chat("q%d" % i, model=model, max_tokens=3))
                self.assertEqual(st, 200, body)
        text = metrics(self.gw.admin_port)
        ep = "127.0.0.1:%d" % self.sim.port

        def delta(name, **labels):
            try:
                b = metric(before, name, **labels)
            except AssertionError:
                b = 0
            return metric(text, name, **labels) - b

        # The alias counts as the served name; lora-c is past max_models: "other".
        self.assertEqual(delta("switchboard_requests_total", pool="p", model=MODEL, endpoint=ep, code="2xx"), 3)
        self.assertEqual(delta("switchboard_requests_total", pool="p", model="lora-a", endpoint=ep, code="2xx"), 2)
        self.assertEqual(delta("switchboard_requests_total", pool="p", model="other", endpoint=ep, code="2xx"), 3)
        for h in ("switchboard_request_duration_seconds", "switchboard_time_to_first_token_seconds",
                  "switchboard_time_to_first_byte_seconds"):
            self.assertEqual(delta(h + "_count", pool="p", model=MODEL), 3, h)
            self.assertEqual(delta(h + "_count", pool="p", model="lora-a"), 2, h)
            self.assertEqual(delta(h + "_count", pool="p", model="other"), 3, h)
            self.assertEqual(delta(h + "_bucket", pool="p", model="other", le="+Inf"), 3, h)
        # Each request asked for 3 completion tokens; the simulator reports its usage.
        self.assertEqual(delta("switchboard_completion_tokens_total", pool="p", model="lora-a"), 6)
        self.assertEqual(delta("switchboard_completion_tokens_total", pool="p", model="other"), 9)
        # The label takes no value the configuration does not bound: never the alias, never
        # lora-c; lora-b is shown once it has traffic, not before.
        seen = {l["model"] for name in ("switchboard_requests_total", "switchboard_request_duration_seconds_count",
                                        "switchboard_prompt_tokens_total") for l in labels_of(text, name)}
        self.assertEqual(seen, {MODEL, "lora-a", "other"})
        self.assertEqual(self.promtool(text), [])

    def test_refusals_by_reason(self):
        http(self.gw.port, "POST", "/v1/chat/completions", chat("x", model="no-such-model"))
        http(self.gw.port, "POST", "/v1/chat/completions", b"{not json")
        http(self.gw.port, "GET", "/v1/chat/completions")
        http(self.gw.port, "GET", "/nowhere")
        text = metrics(self.gw.admin_port)
        for reason in ("model_not_found", "invalid_request", "method_not_allowed", "not_found"):
            self.assertGreaterEqual(metric(text, "switchboard_rejected_total", code="4xx", reason=reason), 1, reason)
        # The sum by class is what the family counted before it had reasons.
        self.assertEqual(metric(text, "switchboard_rejected_total", code="4xx"),
                         sum(metric(text, "switchboard_rejected_total", code="4xx", reason=l["reason"])
                             for l in labels_of(text, "switchboard_rejected_total") if l["code"] == "4xx"))

    def test_every_error_code_has_its_reason(self):
        """The reason label's list (net/stats.c) names every code the gateway's own error answers
        carry: a code added to a caller and not to the list would be counted as "other"."""
        src = lambda path: open(os.path.join(ROOT, "src", path)).read()
        names = set(re.findall(r'"([a-z_]+)"', src("net/stats.c").split("sb_stats_reason_names[SB_REASONS] = {")[1]
                               .split("};")[0]))
        openai_types = {"invalid_request_error", "server_error", "rate_limit_exceeded", "service_unavailable"}
        codes = set(re.findall(r'\{\d{3}, "([a-z_]+)"', src("core/admission.c")))
        codes |= set(re.findall(r'\.reason = "([a-z_]+)",\s*\.message', src("net/admission.c")))
        for f in ("net/routes.c", "net/picker.c", "net/admission.c", "net/gateway.c", "net/precise.c"):
            for call in re.findall(r"sb_errors_(?:answer|answer_with|refuse)\((.*?)\);", src(f), re.S):
                codes |= set(re.findall(r'"([a-z]+(?:_[a-z]+)+)"', call)) - openai_types
        self.assertGreater(len(codes), 10, codes)
        self.assertEqual(codes - names, set())

    def test_build_info_and_version(self):
        with open(os.path.join(ROOT, "VERSION")) as f:
            version = f.read().strip()
        in_git = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True).returncode == 0
        out = subprocess.run([GATEWAY_BIN, "--version"], capture_output=True, text=True, check=True).stdout
        m = re.fullmatch(r"switchboard (\S+) \((\w+)\)\n", out)
        self.assertTrue(m, out)
        self.assertEqual(m.group(1), version)
        commit = m.group(2)
        if in_git:
            # The commit the binary was built from: HEAD, or one before it when HEAD moved
            # since the build; a real commit of this history either way, never "unknown".
            self.assertRegex(commit, r"^[0-9a-f]{7,}$")
            anc = subprocess.run(["git", "-C", ROOT, "merge-base", "--is-ancestor", commit, "HEAD"])
            self.assertEqual(anc.returncode, 0, "%s is not a commit of this history" % commit)
        else:
            self.assertEqual(commit, "unknown")
        self.assertEqual(subprocess.run([GATEWAY_BIN, "version"], capture_output=True, text=True).stdout, out)
        text = metrics(self.gw.admin_port)
        self.assertEqual(metric(text, "switchboard_build_info", version=version, commit=commit), 1)

    def test_process_metrics(self):
        text = metrics(self.gw.admin_port)
        pid = self.gw.proc.pid
        with open("/proc/%d/status" % pid) as f:
            rss_kb = int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))
        fds = len(os.listdir("/proc/%d/fd" % pid))
        self.assertGreater(metric(text, "process_resident_memory_bytes"), 0.5 * rss_kb * 1024)
        self.assertLess(metric(text, "process_resident_memory_bytes"), 2 * rss_kb * 1024)
        self.assertGreater(metric(text, "process_virtual_memory_bytes"), metric(text, "process_resident_memory_bytes"))
        # The listeners, the loop's, the upstream and admin connections: within a few of what
        # /proc shows from outside a moment later (a probe may open or close one meanwhile).
        self.assertGreater(metric(text, "process_open_fds"), 4)
        self.assertLessEqual(abs(metric(text, "process_open_fds") - fds), 8)
        self.assertGreater(metric(text, "process_max_fds"), metric(text, "process_open_fds"))
        # CPU time is counted in clock ticks (10 ms): a gateway just started may show none yet;
        # serving the metrics page costs it some, so it shows some soon.
        wait_until(lambda: metric(metrics(self.gw.admin_port), "process_cpu_seconds_total") > 0,
                   what="process_cpu_seconds_total above 0")
        # The same start time computed another way: boot time (btime) plus the start ticks.
        with open("/proc/stat") as f:
            btime = int(re.search(r"^btime (\d+)$", f.read(), re.M).group(1))
        with open("/proc/%d/stat" % pid) as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22, counted from field 3
        start = metric(text, "process_start_time_seconds")
        self.assertLess(abs(start - (btime + ticks / os.sysconf("SC_CLK_TCK"))), 2)
        self.assertEqual(metric(metrics(self.gw.admin_port), "process_start_time_seconds"), start)

    def test_open_connections_per_listener(self):
        import socket
        held = [socket.create_connection(("127.0.0.1", self.ext_port)) for _ in range(2)]
        try:
            wait_until(lambda: metric(metrics(self.gw.admin_port), "switchboard_open_connections",
                                      listener="ext_proc") == 2, 10, "ext_proc connections counted")
            text = metrics(self.gw.admin_port)
            self.assertGreaterEqual(metric(text, "switchboard_open_connections", listener="admin"), 1)
            self.assertIn("client", {l["listener"] for l in labels_of(text, "switchboard_open_connections")})
        finally:
            for s in held:
                s.close()

    def promtool(self, text):
        return promtool_problems(text) if PROMTOOL else []


class ModelNameEscapingTest(unittest.TestCase):
    """A model name may hold any character the YAML allows: a quote, a backslash, a newline
    must not break the text format (promtool parses the page) nor another series."""

    def test_label_value_escaped(self):
        name = 'we"ird\\mod\nel'
        gw = Gateway([{"name": "p", "models": [name], "endpoints": ["127.0.0.1:%d" % free_port()]}])
        try:
            text = metrics(gw.admin_port)
        finally:
            gw.close()
        self.assertIn('model="we\\"ird\\\\mod\\nel"', text)
        if PROMTOOL:
            self.assertEqual(promtool_problems(text), [])


class ReloadMetricsTest(unittest.TestCase):
    def setUp(self):
        self.sim = Sim("--speed", "50")
        self.gw = Gateway([{"name": "p", "models": [MODEL], "endpoints": ["127.0.0.1:%d" % self.sim.port]}])
        with open(self.gw.config_path) as f:
            self.good = f.read()

    def tearDown(self):
        try:
            self.gw.close()
        finally:
            self.sim.stop()

    def reload_with(self, text, result, n):
        with open(self.gw.config_path, "w") as f:
            f.write(text)
        self.gw.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: metric(metrics(self.gw.admin_port), "switchboard_reloads_total", result=result) == n,
                   10, "reload counted as %s" % result)

    def test_successes_and_failures(self):
        text = metrics(self.gw.admin_port)
        self.assertEqual(metric(text, "switchboard_reloads_total", result="success"), 0)
        self.assertEqual(metric(text, "switchboard_reloads_total", result="failure"), 0)
        started = metric(text, "switchboard_last_reload_success_timestamp_seconds")
        self.assertLess(abs(started - time.time()), 120)
        # Applied: a changed limit, in place.
        self.reload_with(self.good.replace("profile: round-robin", "profile: default"), "success", 1)
        applied = metric(metrics(self.gw.admin_port), "switchboard_last_reload_success_timestamp_seconds")
        self.assertGreaterEqual(applied, started)
        # Refused by the cmd layer: the file does not parse.
        self.reload_with(self.good + "\n  - this: [is not: valid\n", "failure", 1)
        # Refused by the gateway: the listen address changed.
        self.reload_with(re.sub(r'listen: "127.0.0.1:\d+"', 'listen: "127.0.0.1:%d"' % free_port(), self.good, 1),
                         "failure", 2)
        text = metrics(self.gw.admin_port)
        self.assertEqual(metric(text, "switchboard_reloads_total", result="success"), 1)
        self.assertEqual(metric(text, "switchboard_last_reload_success_timestamp_seconds"), applied)
        # Replacing the gateway (a pool's models changed) keeps the counts.
        self.reload_with(self.good.replace('models: ["%s"]' % MODEL, 'models: ["%s", "more"]' % MODEL), "success", 2)
        self.assertEqual(metric(metrics(self.gw.admin_port), "switchboard_reloads_total", result="failure"), 2)
        st, _, _ = http(self.gw.port, "POST", "/v1/chat/completions", chat("after", model="more"))
        self.assertEqual(st, 200)


if __name__ == "__main__":
    unittest.main()
