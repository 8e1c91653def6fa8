"""`switchboard replay` with fleet events (issue 13), end to end on the built binary: gateway
replicas, bypass traffic, restarts and the event lag reach results.csv's extra columns and the
fleet table; --working-set sizes a workload; a run without fleet events writes no extra column;
the new peers are listed and `oracle` is gone. Virtual time: each run is well under a second."""
import csv
import os
import shutil
import tempfile
import unittest

from fixtures import run_replay

SMALL = ["--workload", "shared-prefix", "groups=16", "prefix=2048", "users=4", "question=64", "output=16",
         "--requests", "400", "--rate", "20", "--replicas", "4", "--num-gpu-blocks", "1024"]
FLEET_COLUMNS = ["gateways", "gateway_max_share", "restarts", "failed", "bypass_requests", "bypass_completed",
                 "bypass_failed", "bypass_ttft_p50_ms", "bypass_ttft_p90_ms", "bypass_ttft_p99_ms"]


def replay(*args, check=True):
    return run_replay(*args, check=check, timeout=120)


def read_csv(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return rows[0], [dict(zip(rows[0], r)) for r in rows[1:]]


class ReplayFleetTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="sb-replay-fleet-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_fleet_events_reach_the_csv_and_the_table(self):
        out = os.path.join(self.dir, "fleet")
        res = replay(*SMALL, "--policies", "default,llm-d-sticky,llm-d-precise,dynamo-kv", "--gateways", "2",
                     "--bypass", "0.2", "--restarts", "2", "--event-lag-ms", "50", "--out", out)
        self.assertIn("Fleet events", res.stdout)
        header, rows = read_csv(os.path.join(out, "results.csv"))
        self.assertEqual(header[-len(FLEET_COLUMNS):], FLEET_COLUMNS)
        self.assertEqual([r["policy"] for r in rows], ["default", "llm-d-sticky", "llm-d-precise", "dynamo-kv"])
        for r in rows:
            self.assertEqual(r["gateways"], "2")
            self.assertEqual(r["restarts"], "2")
            bypass = int(r["bypass_requests"])
            self.assertGreater(bypass, 40)
            self.assertLess(bypass, 130)
            # every request is settled once: through the gateways or past them
            self.assertEqual(int(r["requests"]) + bypass, 400)
            self.assertEqual(int(r["requests"]), int(r["completed"]) + int(r["shed"]) + int(r["failed"]))
            self.assertLess(float(r["gateway_max_share"]), 0.7)

    def test_events_feed_the_product_index(self):
        """POLICY+events: the engines' KV events reach the routers' precise index. Under cache
        pressure (long shared prompts, caches holding part of them) the routers stop sending
        traffic after blocks the engines evicted: the hit rate rises; the suffixes combine;
        and the events arrive with the configured lag (a huge lag changes the results)."""
        out = os.path.join(self.dir, "events")
        args = ["--workload", "shared-prefix", "groups=24", "prefix=3072", "--requests", "600", "--rate", "10",
                "--replicas", "4", "--num-gpu-blocks", "1500", "--seed", "3"]
        replay(*args, "--policies", "prefix-only,prefix-only+events,default+events+adaptive", "--out", out)
        _, rows = read_csv(os.path.join(out, "results.csv"))
        by = {r["policy"]: r for r in rows}
        self.assertEqual(sorted(by), ["default+events+adaptive", "prefix-only", "prefix-only+events"])
        self.assertGreater(float(by["prefix-only+events"]["hit_rate"]), float(by["prefix-only"]["hit_rate"]) + 0.05)
        late = os.path.join(self.dir, "late")
        replay(*args, "--policies", "prefix-only+events", "--event-lag-ms", "600000", "--out", late)
        _, rows = read_csv(os.path.join(late, "results.csv"))
        self.assertNotEqual(rows[0]["hit_rate"], by["prefix-only+events"]["hit_rate"])
        bad = replay(*args, "--policies", "random+events", check=False)
        self.assertNotEqual(bad.returncode, 0)
        self.assertIn("KV events need a profile", bad.stderr)

    def test_gateway_sync(self):
        """--gateway-sync-ms: each gateway's router hears the others' dispatches. Under cache
        pressure with three gateways, hearing them at once raises the engines' hit rate (each
        router knows where every prefix went); the peers' own policies are untouched; and a lag
        changes the result."""
        args = ["--workload", "shared-prefix", "groups=32", "prefix=4000", "--requests", "600", "--rate", "2",
                "--replicas", "8", "--num-gpu-blocks", "1200", "--seed", "3", "--gateways", "3"]
        runs = {}
        for name, extra in (("off", []), ("now", ["--gateway-sync-ms", "0"]), ("late", ["--gateway-sync-ms", "400"])):
            out = os.path.join(self.dir, name)
            replay(*args, "--policies", "default,gie-default", *extra, "--out", out)
            runs[name] = {r["policy"]: r for r in read_csv(os.path.join(out, "results.csv"))[1]}
        # measured: hit rate 0.30 alone, 0.54 in sync
        self.assertGreater(float(runs["now"]["default"]["hit_rate"]), float(runs["off"]["default"]["hit_rate"]) + 0.1)
        self.assertEqual(runs["now"]["gie-default"], runs["off"]["gie-default"])
        self.assertNotEqual(runs["late"]["default"]["ttft_p90_ms"], runs["now"]["default"]["ttft_p90_ms"])
        bad = replay(*args, "--gateway-sync-ms", "-1", check=False)
        self.assertEqual(bad.returncode, 2)

    def test_no_fleet_events_no_extra_columns(self):
        out = os.path.join(self.dir, "plain")
        res = replay(*SMALL, "--policies", "default", "--out", out)
        self.assertNotIn("Fleet events", res.stdout)
        header, _ = read_csv(os.path.join(out, "results.csv"))
        self.assertNotIn("gateways", header)

    def test_working_set(self):
        text = replay(*SMALL, "--working-set").stdout
        fields = dict(line.split() for line in text.strip().splitlines())
        # 16 system prompts of 2,048 tokens (128 blocks each) and 64 questions of 64 tokens
        # (4 blocks each; question and prompt are separate spans, so every block is whole).
        self.assertEqual(int(fields["working_set_blocks"]), 16 * 128 + 64 * 4)
        self.assertEqual(int(fields["block_size"]), 16)

    def test_peers_listed_and_oracle_renamed(self):
        text = replay("--list").stdout
        for name in ("llm-d-sticky", "llm-d-precise", "min-predicted-ttft"):
            self.assertIn(name, text)
        self.assertNotIn("oracle ", text)
        res = replay(*SMALL, "--policies", "oracle", check=False)
        self.assertNotEqual(res.returncode, 0)
        self.assertIn("unknown policy", res.stderr)

    def test_bad_fleet_flags(self):
        for args in (["--gateways", "0"], ["--bypass", "1.5"], ["--restarts", "2", "--restart-every", "5"]):
            res = replay(*SMALL, *args, check=False)
            self.assertEqual(res.returncode, 2, args)


if __name__ == "__main__":
    unittest.main()


class SyncProbeTest(unittest.TestCase):
    """--sync-probe-ms: only requests whose best candidates' reports are older than the bound
    wait for a probe; with fresh reports nothing changes; with reports going stale between slow
    scrapes the probe keeps routing on fresh figures."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="sb-replay-probe-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def run_one(self, name, *extra):
        out = os.path.join(self.dir, name)
        res = replay(*SMALL, "--policies", "default", "--out", out, *extra)
        _, rows = read_csv(os.path.join(out, "results.csv"))
        probes = [line for line in res.stderr.splitlines() if "synchronous probe" in line]
        return rows[0], probes

    def test_fresh_reports_are_never_probed(self):
        base, none = self.run_one("base", "--scrape-ms", "100")
        same, probes = self.run_one("probe", "--scrape-ms", "100", "--sync-probe-ms", "900")
        self.assertEqual(none, [])
        self.assertEqual(probes, [], "reports 100 ms old are under the 900 ms bound")
        self.assertEqual(base, same)

    def test_stale_candidates_are_probed_and_routing_recovers(self):
        stale, none = self.run_one("stale", "--scrape-ms", "3000")
        probed, probes = self.run_one("probed", "--scrape-ms", "3000", "--sync-probe-ms", "900",
                                      "--sync-probe-rtt-ms", "2")
        self.assertEqual(none, [])
        self.assertEqual(len(probes), 1)
        n = int(probes[0].split()[2])
        self.assertGreater(n, 0)
        self.assertLess(n, int(probed["requests"]))
        # Routing on fresh figures: a lower p90 TTFT than on reports up to 3 s old.
        self.assertLess(float(probed["ttft_p90_ms"]), float(stale["ttft_p90_ms"]))

    def test_bad_candidates_refused(self):
        res = replay(*SMALL, "--policies", "default", "--sync-probe-ms", "50", "--sync-probe-candidates", "9",
                     check=False)
        self.assertNotEqual(res.returncode, 0)
