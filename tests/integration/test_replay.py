"""`switchboard replay` end to end: the built binary on a small generated workload and on a
slice of the Mooncake trace. Checks the CSV's contract (its first columns, one row per policy
and rate), determinism (identical bytes from identical runs), errors that name the trace line,
and one effect large enough to be robust: with caches too small to hold every group's system
prompt on every replica, the default profile (prefix affinity) hits the cache far more often
than round robin. Virtual time: each run takes well under a second of CPU."""
import csv
import os
import shutil
import subprocess
import tempfile
import unittest

from fixtures import GATEWAY_BIN, ROOT, run_replay

COLUMNS = ("policy,rate,requests,completed,shed,ttft_p50_ms,ttft_p90_ms,ttft_p99_ms,e2e_p50_ms,e2e_p99_ms,"
           "itl_p50_ms,output_tok_s,hit_rate,imbalance_cv").split(",")
TRACES = os.environ.get("SB_TRACES_DIR", os.path.join(ROOT, "tests", "data", "traces"))  # in the repository
MOONCAKE = os.path.join(TRACES, "mooncake", "conversation_trace.jsonl")
# A small fleet whose caches hold 8 of the 16 system prompts (1,024 blocks of 16 tokens).
SMALL = ["--workload", "shared-prefix", "groups=16", "prefix=2048", "users=4", "question=64", "output=16",
         "--requests", "400", "--rate", "20", "--replicas", "4", "--num-gpu-blocks", "1024"]


def replay(*args, check=True):
    return run_replay(*args, check=check, timeout=120)


def read_csv(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return rows[0], [dict(zip(rows[0], r)) for r in rows[1:]]


class ReplayTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="sb-replay-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def out(self, name):
        return os.path.join(self.dir, name)

    def test_list_names_workloads_and_policies(self):
        text = replay("--list").stdout
        for name in ("shared-prefix", "multi-turn", "hot-prefix", "no-sharing", "lora-mix", "round-robin", "random",
                     "least-request", "p2c", "default", "load-only"):
            self.assertIn(name, text)

    def test_small_workload_csv_and_prefix_affinity(self):
        replay(*SMALL, "--policies", "round-robin,default,random", "--out", self.out("a"))
        header, rows = read_csv(self.out("a/results.csv"))
        self.assertEqual(header[:len(COLUMNS)], COLUMNS)
        self.assertEqual([r["policy"] for r in rows], ["round-robin", "default", "random"])
        by = {r["policy"]: r for r in rows}
        for r in rows:
            self.assertEqual(r["requests"], "400")
            self.assertEqual(int(r["completed"]) + int(r["shed"]), 400)
            self.assertEqual(r["completed"], "400")
            self.assertTrue(0 <= float(r["hit_rate"]) <= 1)
            self.assertTrue(0 < float(r["ttft_p50_ms"]) <= float(r["ttft_p90_ms"]) <= float(r["ttft_p99_ms"]))
            self.assertGreater(float(r["output_tok_s"]), 0)
        self.assertEqual(float(by["round-robin"]["imbalance_cv"]), 0.0)  # 400 requests, 4 replicas, in turn
        self.assertGreater(float(by["default"]["hit_rate"]), float(by["round-robin"]["hit_rate"]) + 0.2)
        self.assertTrue(os.path.exists(self.out("a/results.md")))
        if shutil.which("gnuplot"):
            self.assertGreater(os.path.getsize(self.out("a/ttft_cdf.png")), 1000)
        # requests.csv: one row per request and policy, agreeing with the summary row.
        _, reqs = read_csv(self.out("a/requests.csv"))
        self.assertEqual(len(reqs), 3 * 400)
        for pol in ("round-robin", "default", "random"):
            mine = [r for r in reqs if r["policy"] == pol]
            self.assertEqual(sorted(int(r["request"]) for r in mine), list(range(400)))
            self.assertTrue(all(r["outcome"] == "completed" and 0 <= int(r["replica"]) < 4 for r in mine))
            cached = sum(int(r["cached_tokens"]) for r in mine)
            prompt = sum(int(r["prompt_tokens"]) for r in mine)
            self.assertAlmostEqual(cached / prompt, float(by[pol]["hit_rate"]), places=3)
            self.assertEqual(int(by[pol]["cached_tokens"]), cached)

    def test_requests_csv_numbers_the_turns_of_each_conversation(self):
        replay("--workload", "multi-turn", "turns=3", "think_ms=100", "--requests", "60", "--replicas", "2",
               "--policies", "session-hash", "--out", self.out("t"))
        _, reqs = read_csv(self.out("t/requests.csv"))
        by_session = {}
        for r in reqs:
            by_session.setdefault(r["session"], []).append(r)
        self.assertEqual(len(by_session), 20)
        for rows in by_session.values():
            rows.sort(key=lambda r: float(r["arrival_ms"]))
            self.assertEqual([int(r["turn"]) for r in rows], [1, 2, 3])
            self.assertEqual(len({r["replica"] for r in rows}), 1)  # session-hash keeps a conversation
            self.assertEqual(sorted(int(r["prompt_tokens"]) for r in rows), [int(r["prompt_tokens"]) for r in rows])

    def test_deterministic_bytes(self):
        replay(*SMALL, "--policies", "p2c,random", "--seed", "7", "--out", self.out("x"))
        replay(*SMALL, "--policies", "p2c,random", "--seed", "7", "--out", self.out("y"))
        for name in ("results.csv", "ttft_cdf.dat"):
            with open(self.out("x/" + name), "rb") as a, open(self.out("y/" + name), "rb") as b:
                self.assertEqual(a.read(), b.read(), name)

    def test_rate_sweep_rows_and_plot(self):
        replay("--workload", "no-sharing", "prompt=500", "output=8", "--requests", "100", "--rates", "5,20",
               "--replicas", "2", "--policies", "least-request,load-only", "--out", self.out("s"))
        _, rows = read_csv(self.out("s/results.csv"))
        self.assertEqual([(r["policy"], float(r["rate"])) for r in rows],
                         [("least-request", 5.0), ("load-only", 5.0), ("least-request", 20.0), ("load-only", 20.0)])
        if shutil.which("gnuplot"):
            self.assertGreater(os.path.getsize(self.out("s/ttft_p90_vs_rate.png")), 1000)

    def test_mooncake_slice(self):
        p = replay("--trace", MOONCAKE, "--requests", "300", "--rate-scale", "20", "--replicas", "4",
                   "--policies", "round-robin,least-request", "--out", self.out("m"))
        self.assertIn("| round-robin |", p.stdout)
        header, rows = read_csv(self.out("m/results.csv"))
        self.assertEqual(header[:len(COLUMNS)], COLUMNS)
        for r in rows:
            self.assertEqual(r["requests"], "300")
            self.assertEqual(r["completed"], "300")
            # Every Mooncake conversation prompt starts with block 0: some prompt tokens hit.
            self.assertGreater(float(r["hit_rate"]), 0)

    def test_malformed_trace_names_the_line(self):
        path = self.out("bad.jsonl")
        with open(path, "w") as f:
            f.write('{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}\n')
            f.write('{"timestamp": 1, "input_length": "many", "output_length": 5, "hash_ids": [2]}\n')
        p = replay("--trace", path, "--policies", "round-robin", check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn(path + ":2: input_length", p.stderr)

    def test_bad_arguments(self):
        for args in (["--workload", "nope"], ["--workload", "no-sharing", "colour=blue"],
                     ["--workload", "no-sharing", "--policies", "nope"], ["--replicas", "2"]):
            p = replay(*args, check=False)
            self.assertNotEqual(p.returncode, 0, args)
            self.assertTrue(p.stderr.strip(), args)


if __name__ == "__main__":
    unittest.main()
