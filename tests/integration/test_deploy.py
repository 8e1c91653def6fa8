"""deploy/: what can be checked here without Envoy or a cluster. Every file parses as YAML; the
Envoy configuration's field names and enum values exist in Envoy's API definitions (checked by
tests/extproc/validate_envoy.js, which must also catch a misspelt field and enum value); the
Kubernetes manifests carry that same Envoy configuration, and a picker configuration that
switchboard itself accepts (`switchboard check`) and that agrees with Envoy's (port, header,
fallbacks)."""
import json
import os
import subprocess
import tempfile
import unittest

import yaml

import extproc_driver as ep
from fixtures import GATEWAY_BIN, ROOT
from test_extproc import REQUIRED

DEPLOY = os.path.join(ROOT, "deploy")
VALIDATOR = os.path.join(ROOT, "tests", "extproc", "validate_envoy.js")


def load_all(name):
    with open(os.path.join(DEPLOY, name)) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def validate(config):
    p = subprocess.run([ep.NODE, VALIDATOR], input=json.dumps(config), capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout + p.stderr


class DeployTest(unittest.TestCase):
    def setUp(self):
        self.envoy = load_all("envoy.yaml")[0]
        self.k8s = load_all("kubernetes.yaml")

    def need_node(self):
        why = ep.missing()
        if why:
            if REQUIRED:
                raise AssertionError("the Envoy config validator cannot run: " + why)
            self.skipTest(why)

    def find(self, kind, name):
        found = [d for d in self.k8s if d["kind"] == kind and d["metadata"]["name"] == name]
        self.assertEqual(len(found), 1, (kind, name))
        return found[0]

    def test_every_file_parses(self):
        for name in sorted(os.listdir(DEPLOY)):
            if name.endswith((".yaml", ".yml")):
                self.assertTrue(load_all(name), name)
        kinds = sorted(d["kind"] for d in self.k8s)
        self.assertEqual(kinds, sorted(["Namespace", "Deployment", "Service", "ConfigMap", "Deployment", "Service",
                                        "NetworkPolicy", "ConfigMap", "Deployment", "Service"]))
        # Only Envoy's pods may reach the picker's gRPC port.
        np = self.find("NetworkPolicy", "switchboard-picker")
        self.assertEqual(np["spec"]["podSelector"]["matchLabels"],
                         self.find("Deployment", "switchboard-picker")["spec"]["selector"]["matchLabels"])
        self.assertEqual(np["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"],
                         self.find("Deployment", "envoy")["spec"]["selector"]["matchLabels"])

    def test_envoy_config_matches_the_api(self):
        self.need_node()
        rc, out = validate(self.envoy)
        self.assertEqual(rc, 0, out)
        self.assertIn("ok:", out)

    def test_validator_catches_misspellings(self):
        self.need_node()
        cluster = self.envoy["static_resources"]["clusters"][0]
        cluster["original_dst_lb_config"]["http_header_nam"] = cluster["original_dst_lb_config"].pop("http_header_name")
        rc, out = validate(self.envoy)
        self.assertEqual(rc, 1, out)
        self.assertIn("http_header_nam", out)
        envoy = load_all("envoy.yaml")[0]
        hcm = envoy["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
        hcm["http_filters"][0]["typed_config"]["processing_mode"]["request_body_mode"] = "FULL_DUPLEX_STREAM"
        rc, out = validate(envoy)
        self.assertEqual(rc, 1, out)
        self.assertIn("FULL_DUPLEX_STREAM", out)
        envoy = load_all("envoy.yaml")[0]
        envoy["static_resources"]["clusters"][1]["typed_extension_protocol_options"][
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]["@type"] = "type.googleapis.com/envoy.Nope"
        rc, out = validate(envoy)
        self.assertEqual(rc, 1, out)
        self.assertIn("unknown @type", out)

    def test_configmap_carries_the_same_envoy_config(self):
        cm = self.find("ConfigMap", "envoy")
        self.assertEqual(yaml.safe_load(cm["data"]["envoy.yaml"]), self.envoy,
                         "deploy/kubernetes.yaml's envoy ConfigMap must be deploy/envoy.yaml")

    def test_picker_config_agrees_with_envoy_and_switchboard_accepts_it(self):
        text = self.find("ConfigMap", "switchboard-picker")["data"]["switchboard.yaml"]
        cfg = yaml.safe_load(text)
        port = int(cfg["ext_proc"]["listen"].rsplit(":", 1)[1])
        picker = self.envoy["static_resources"]["clusters"][1]
        sa = picker["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"]
        self.assertEqual(sa["port_value"], port)
        svc = self.find("Service", "switchboard-picker")
        self.assertEqual(svc["spec"]["ports"][0]["port"], port)
        self.assertEqual(sa["address"].split(".")[0], svc["metadata"]["name"])
        self.assertEqual(svc["spec"].get("clusterIP"), "None")
        # ORIGINAL_DST takes one address from the header: no fallbacks in it.
        self.assertEqual(cfg["ext_proc"]["fallbacks"], 0)
        odst = self.envoy["static_resources"]["clusters"][0]
        self.assertEqual(odst["original_dst_lb_config"]["http_header_name"], "x-gateway-destination-endpoint")
        # The pool's DNS name is the headless model-server Service.
        pool_svc = self.find("Service", "vllm-llama")
        self.assertEqual(pool_svc["spec"]["clusterIP"], "None")
        dns = cfg["pools"][0]["endpoints_from"]["dns"]
        self.assertTrue(dns.startswith("vllm-llama.inference.svc"), dns)
        self.assertEqual(int(dns.rsplit(":", 1)[1]), pool_svc["spec"]["ports"][0]["port"])
        # switchboard accepts the file (the token file is the Secret's, placed here).
        with tempfile.TemporaryDirectory() as d:
            tok = os.path.join(d, "token")
            with open(tok, "w") as f:
                f.write("a-test-token\n")
            path = os.path.join(d, "switchboard.yaml")
            with open(path, "w") as f:
                f.write(text.replace("/etc/switchboard-admin/token", tok))
            p = subprocess.run([GATEWAY_BIN, "check", "-c", path], capture_output=True, text=True, timeout=30)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)


if __name__ == "__main__":
    unittest.main()
