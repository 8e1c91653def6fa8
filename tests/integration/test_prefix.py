"""Prefix-cache-aware routing through the live gateway and four simulated replicas.

The simulators' own counters judge: vllm:prefix_cache_hits_total / queries_total, summed over
the replicas, must be at least twice round robin's on a workload of groups sharing long system
prompts (with caches small enough that spreading a group over every replica thrashes them);
and one hot prefix under more load than one replica can take must not pile onto the replica
that holds it."""
import json
import re
import threading
import unittest

from fixtures import Gateway, http
from test_sim import MODEL, Sim

WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa "
         "quebec romeo sierra tango uniform victor whiskey xray yankee zulu").split()


def system_prompt(group, n_words=1600):
    # Deterministic, distinct per group from the first word on.
    return "group %d. " % group + " ".join(WORDS[(group * 7 + i * 3) % len(WORDS)] for i in range(n_words))


def hit_ratio(sim):
    hits = queries = 0.0
    for port in sim.ports:
        st, _, body = http(port, "GET", "/metrics")
        text = body.decode()
        hits += sum(float(m) for m in re.findall(r"^vllm:prefix_cache_hits_total\{[^}]*\} (\S+)$", text, re.M))
        queries += sum(float(m) for m in re.findall(r"^vllm:prefix_cache_queries_total\{[^}]*\} (\S+)$", text, re.M))
    return hits / queries if queries else 0.0


def run_groups(profile, groups=15, questions=6, clients=4):
    # ~125 KV blocks of 16 tokens per group prefix; 700 blocks per replica hold ~5 groups:
    # a replica that sees every group (round robin) thrashes, one that sees a quarter keeps them.
    sim = Sim("--speed", "20", "--num-gpu-blocks", "700", replicas=4)
    try:
        gw = Gateway([{"name": "p", "models": [MODEL], "profile": profile,
                       "endpoints": ["127.0.0.1:%d" % p for p in sim.ports]}])
        try:
            work = [(g, q) for q in range(questions) for g in range(groups)]
            lock = threading.Lock()
            errors = []

            def client():
                while True:
                    with lock:
                        if not work:
                            return
                        g, q = work.pop(0)
                    body = {"model": MODEL, "max_tokens": 2, "messages": [
                        {"role": "system", "content": system_prompt(g)},
                        {"role": "user", "content": "question %d for group %d?" % (q, g)}]}
                    st, _, _ = http(gw.port, "POST", "/v1/chat/completions", body, timeout=30)
                    if st != 200:
                        errors.append(st)

            threads = [threading.Thread(target=client) for _ in range(clients)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert not errors, errors
            return hit_ratio(sim)
        finally:
            gw.close()
    finally:
        sim.stop()


class PrefixRoutingTest(unittest.TestCase):
    def test_shared_prefix_groups_hit_rate_twice_round_robin(self):
        rr = run_groups("round-robin")
        default = run_groups("default")
        print("\nprefix hit ratio: round-robin %.3f, default %.3f" % (rr, default))
        self.assertGreaterEqual(default, 2 * rr, "default %.3f vs round robin %.3f" % (default, rr))
        # 0.8 on a quiet machine; a loaded one (other builds on both cores) slows the simulated
        # replicas, queues build and the load scorers rightly spread some groups: 0.40-0.72 seen.
        self.assertGreater(default, 0.35)

    def test_hot_prefix_does_not_pile_onto_one_replica(self):
        sim = Sim("--speed", "4", "--max-num-seqs", "4", replicas=4)
        try:
            gw = Gateway([{"name": "p", "models": [MODEL], "profile": "default",
                           "endpoints": ["127.0.0.1:%d" % p for p in sim.ports]}])
            try:
                hot = system_prompt(99, 1200)
                errors = []

                def client(k):
                    for i in range(8):
                        body = {"model": MODEL, "max_tokens": 48, "messages": [
                            {"role": "system", "content": hot},
                            {"role": "user", "content": "client %d asks %d" % (k, i)}]}
                        st, _, _ = http(gw.port, "POST", "/v1/chat/completions", body, timeout=60)
                        if st != 200:
                            errors.append(st)

                threads = [threading.Thread(target=client, args=(k,)) for k in range(16)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                self.assertEqual(errors, [])
                st, _, body = http(gw.admin_port, "GET", "/debug/endpoints")
                counts = [e["own"]["dispatched"] for e in json.loads(body)["pools"][0]["endpoints"]]
                fair = sum(counts) / len(counts)
                print("\nhot prefix: requests per replica %s (fair share %.0f)" % (counts, fair))
                self.assertEqual(sum(counts), 128)
                self.assertLessEqual(max(counts), 1.5 * fair, counts)
                # Affinity still pays: the replicas share the hot prefix's cache.
                self.assertGreater(hit_ratio(sim), 0.5)
            finally:
                gw.close()
        finally:
            sim.stop()


    def test_opening_burst_spreads_until_the_prefix_is_computed(self):
        # prefix-only has no load signal at all: before pending prefixes, every request after
        # the first went to the first holder. A prefix counts for a replica only once a token
        # of an answer came back, so a simultaneous opening spreads over the pool; afterwards
        # the holders attract the prefix's requests.
        sim = Sim("--speed", "1", replicas=4)
        try:
            gw = Gateway([{"name": "p", "models": [MODEL], "profile": "prefix-only",
                           "endpoints": ["127.0.0.1:%d" % p for p in sim.ports]}])
            try:
                hot = system_prompt(42, 3000)
                start = threading.Barrier(16)
                errors = []

                def client(k):
                    body = {"model": MODEL, "max_tokens": 8, "stream": True, "messages": [
                        {"role": "system", "content": hot}, {"role": "user", "content": "burst %d" % k}]}
                    start.wait()
                    st, _, _ = http(gw.port, "POST", "/v1/chat/completions", body, timeout=60)
                    if st != 200:
                        errors.append(st)

                threads = [threading.Thread(target=client, args=(k,)) for k in range(16)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                self.assertEqual(errors, [])
                st, _, body = http(gw.admin_port, "GET", "/debug/endpoints")
                counts = [e["own"]["dispatched"] for e in json.loads(body)["pools"][0]["endpoints"]]
                print("\nopening burst, prefix-only: requests per replica %s" % counts)
                self.assertEqual(sum(counts), 16)
                self.assertGreaterEqual(sum(1 for c in counts if c), 3, counts)
                # Every answer came back: nothing is left pending.
                eps = json.loads(body)["pools"][0]["endpoints"]
                self.assertEqual([e["prefix_index"]["pending"] for e in eps], [0, 0, 0, 0])
                # Computed now: the next request of the prefix goes to a replica that holds it,
                # and the decision shows a full prefix score there.
                st, _, _ = http(gw.port, "POST", "/v1/chat/completions", {"model": MODEL, "max_tokens": 4, "messages": [
                    {"role": "system", "content": hot}, {"role": "user", "content": "after"}]}, timeout=60)
                self.assertEqual(st, 200)
                st, _, body = http(gw.admin_port, "GET", "/debug/decisions")
                d = [x for x in json.loads(body)["decisions"] if x["pool"] == "p"][0]
                picked = [c for c in d["candidates"] if c.get("picked")] or \
                         [max(d["candidates"], key=lambda c: c.get("total", 0))]
                self.assertGreater(picked[0]["scores"]["prefix"], 0.9)
            finally:
                gw.close()
        finally:
            sim.stop()


def chat_text(text):
    return {"model": MODEL, "messages": [{"role": "system", "content": text}, {"role": "user", "content": "go"}],
            "max_tokens": 2}


def index_of(gw):
    st, _, body = http(gw.admin_port, "GET", "/debug/endpoints")
    assert st == 200, body
    return json.loads(body)["pools"][0]["endpoints"][0]["prefix_index"]


class CalibrateTest(unittest.TestCase):
    """prefix_calibrate: what an engine's answer says it found cached (usage's cached_tokens)
    against what the gateway's index predicted. Traffic that goes around the gateway evicts a
    prompt the index still marks; the next answer for it teaches the index to keep less of
    that endpoint's cache (/debug/endpoints: calibrated_share 0.85 after one such answer)."""

    def run_case(self, calibrate):
        sim = Sim("--num-gpu-blocks", "96")  # 1,536 tokens: two of the prompts below
        gw = None
        try:
            extra = [] if calibrate else ["prefix_calibrate: false"]
            gw = Gateway([{"name": "p", "models": [MODEL], "profile": "default",
                           "endpoints": ["127.0.0.1:%d" % sim.port], "yaml": extra}])
            a = system_prompt(1, 500)
            st, _, body = http(gw.port, "POST", "/v1/chat/completions", chat_text(a))
            self.assertEqual(st, 200, body)
            self.assertEqual(index_of(gw)["calibrated_share"], 1.0)  # nothing predicted yet
            for g in range(2, 8):  # around the gateway: the engine's cache turns over
                st, _, body = http(sim.port, "POST", "/v1/chat/completions", chat_text(system_prompt(g, 500)))
                self.assertEqual(st, 200, body)
            st, _, body = http(gw.port, "POST", "/v1/chat/completions", chat_text(a))
            self.assertEqual(st, 200, body)
            self.assertLessEqual(json.loads(body)["usage"]["prompt_tokens_details"]["cached_tokens"], 16)
            return index_of(gw)["calibrated_share"]
        finally:
            if gw:
                gw.close()
            sim.stop()

    def test_an_answer_that_found_less_cached_shrinks_the_index(self):
        self.assertEqual(self.run_case(True), 0.85)

    def test_off_the_index_keeps_the_whole_cache(self):
        self.assertEqual(self.run_case(False), 1.0)


if __name__ == "__main__":
    unittest.main()
