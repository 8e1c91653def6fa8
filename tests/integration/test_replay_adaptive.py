"""`switchboard replay` with the adaptive and flow-control options, end to end on the built binary: --adaptive and the
NAME+adaptive suffix (rows named so, adaptive columns filled, the bare profile unchanged),
--flow-control with --priority-mix and --tenants on one overloaded replica (the 14 required
columns first, per-band columns that add up, sheddable refused and critical served), a config
profile run adaptive, and the options' errors. Small workloads in virtual time: about a second."""
import csv
import os
import shutil
import subprocess
import tempfile
import unittest

from fixtures import GATEWAY_BIN, ROOT, run_replay

COLUMNS = ("policy,rate,requests,completed,shed,ttft_p50_ms,ttft_p90_ms,ttft_p99_ms,e2e_p50_ms,e2e_p99_ms,"
           "itl_p50_ms,output_tok_s,hit_rate,imbalance_cv").split(",")
BANDS = ("critical", "standard", "sheddable")
PROFILES = os.path.join(ROOT, "examples", "replay-profiles.yaml")
# A hot system prompt with no opening burst: static prefix affinity keeps it on few replicas.
HOT = ["--workload", "hot-prefix", "prefix=4000", "question=100", "output=100", "burst=0",
       "--requests", "300", "--rate", "20", "--replicas", "4"]
# One replica offered about four times what it serves.
OVERLOAD = ["--workload", "no-sharing", "prompt=2000", "output=200", "--requests", "300", "--rate", "60",
            "--replicas", "1"]


def replay(*args, check=True):
    return run_replay(*args, check=check, timeout=60)


def read_csv(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return rows[0], {r[0]: dict(zip(rows[0], r)) for r in rows[1:]}


class ReplayAdaptiveTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="sb-replay-adaptive-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def out(self, name):
        return os.path.join(self.dir, name)

    def test_adaptive_suffix_and_flag(self):
        p = replay(*HOT, "--policies", "default,default+adaptive,least-request", "--out", self.out("a"))
        self.assertIn("Adaptive weights", p.stdout)
        header, rows = read_csv(self.out("a/results.csv"))
        self.assertEqual(header[:len(COLUMNS)], COLUMNS)
        self.assertEqual(list(rows), ["default", "default+adaptive", "least-request"])
        st, ad = rows["default"], rows["default+adaptive"]
        self.assertEqual(st["adaptive_generations"], "0")
        self.assertGreater(int(ad["adaptive_generations"]), 1)
        self.assertGreater(float(ad["adaptive_share_max"]), 0.6)
        self.assertLess(float(ad["imbalance_cv"]), float(st["imbalance_cv"]))
        self.assertGreaterEqual(float(ad["hit_rate"]), 0.9 * float(st["hit_rate"]))
        # --adaptive renames every profile policy and gives the same numbers as the suffix.
        replay(*HOT, "--policies", "default", "--adaptive", "--out", self.out("b"))
        _, rows_b = read_csv(self.out("b/results.csv"))
        self.assertEqual(list(rows_b), ["default+adaptive"])
        self.assertEqual(rows_b["default+adaptive"], ad)

    def test_flow_control_per_band_columns(self):
        args = OVERLOAD + ["--policies", "least-request,default", "--priority-mix",
                           "critical=0.2,standard=0.5,sheddable=0.3", "--tenants", "3"]
        p = replay(*args, "--flow-control", "--out", self.out("f"))
        self.assertIn("Per priority band", p.stdout)
        header, rows = read_csv(self.out("f/results.csv"))
        self.assertEqual(header[:len(COLUMNS)], COLUMNS)
        for name, r in rows.items():
            self.assertEqual(int(r["requests"]), 300)
            self.assertEqual(int(r["completed"]) + int(r["shed"]), 300)
            self.assertEqual(sum(int(r[b + "_requests"]) for b in BANDS), 300)
            self.assertEqual(sum(int(r[b + "_completed"]) for b in BANDS), int(r["completed"]))
            self.assertEqual(sum(int(r[b + "_shed"]) for b in BANDS), int(r["shed"]))
            self.assertEqual(sum(int(r[b + "_refused"]) for b in BANDS), int(r["refused"]))
            self.assertEqual(sum(int(r[b + "_expired"]) for b in BANDS), int(r["expired"]))
            self.assertEqual(r["critical_completed"], r["critical_requests"], name)
            self.assertGreater(int(r["sheddable_refused"]), int(r["sheddable_requests"]) // 2, name)
        # Without flow control: nothing refused, and critical waits as long as everyone.
        replay(*args, "--out", self.out("n"))
        _, none = read_csv(self.out("n/results.csv"))
        for name in rows:
            self.assertEqual(none[name]["shed"], "0")
            self.assertLess(float(rows[name]["critical_ttft_p90_ms"]),
                            float(none[name]["critical_ttft_p90_ms"]) / 2)
        # Deterministic bytes.
        replay(*args, "--flow-control", "--out", self.out("g"))
        with open(self.out("f/results.csv")) as a, open(self.out("g/results.csv")) as b:
            self.assertEqual(a.read(), b.read())

    def test_config_profile_adaptive_and_latency(self):
        replay(*HOT, "--config", PROFILES, "--policies", "latency,prefix-w5,prefix-w5+adaptive",
               "--out", self.out("c"))
        _, rows = read_csv(self.out("c/results.csv"))
        self.assertEqual(list(rows), ["latency", "prefix-w5", "prefix-w5+adaptive"])
        for r in rows.values():
            self.assertEqual(r["completed"], "300")

    def test_errors(self):
        for args, text in ((["--policies", "random+adaptive"], "need a profile"),
                           (["--priority-mix", "urgent=1"], "priority-mix"),
                           (["--priority-mix", "critical=0"], "positive"),
                           (["--adaptive-param", "k=-1"], "adaptive-param"),
                           (["--adaptive-param", "bogus=1"], "bogus")):
            p = replay(*HOT, *args, check=False)
            self.assertEqual(p.returncode, 2, args)
            self.assertIn(text, p.stderr, args)


if __name__ == "__main__":
    unittest.main()
