"""What a platform team installs: `make install` (PREFIX, DESTDIR, the operator's configuration
kept), the systemd units it writes (systemd-analyze verify clean, this prefix's paths), the
installed binary running the installed demo configuration in front of `demo --fleet-only` as the
two packaged services would (reload on SIGHUP, drain on SIGTERM), `make uninstall`, and the
Dockerfile's runtime libraries against what the binary links. The Debian package itself is built
and linted by `make package` (a minute and a half of -O2 build: not in `make test`)."""
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import unittest

import yaml

from fixtures import ROOT, free_port, free_run, http, wait_until

UNITS = ("switchboard.service", "switchboard-demo-fleet.service")


def make(*args):
    return subprocess.run(["make", "--no-print-directory", "-C", ROOT] + list(args), capture_output=True, text=True)


class InstallTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="sb-install-")
        cls.prefix = os.path.join(cls.dir, "usr")
        cls.etc = os.path.join(cls.dir, "etc")
        cls.units = os.path.join(cls.dir, "units")
        cls.vars = ["PREFIX=" + cls.prefix, "SYSCONFDIR=" + cls.etc, "UNITDIR=" + cls.units]
        r = make("install", *cls.vars)
        if r.returncode != 0:
            raise AssertionError("make install failed:\n" + r.stdout + r.stderr)
        cls.bin = os.path.join(cls.prefix, "bin", "switchboard")
        cls.config = os.path.join(cls.etc, "switchboard", "switchboard.yaml")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_layout(self):
        self.assertTrue(os.access(self.bin, os.X_OK))
        self.assertEqual(os.stat(self.bin).st_mode & 0o777, 0o755)
        for f in ("share/man/man1/switchboard.1.gz", "share/doc/switchboard/LICENSE",
                  "share/doc/switchboard/configuration.md", "share/doc/switchboard/examples/demo.yaml"):
            self.assertTrue(os.path.isfile(os.path.join(self.prefix, f)), f)
        with open(self.config) as f, open(os.path.join(ROOT, "examples", "demo.yaml")) as g:
            self.assertEqual(f.read(), g.read(), "the installed configuration is the demo's")
        r = subprocess.run([self.bin, "check", "-c", self.config], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        r = subprocess.run([self.bin, "version"], capture_output=True, text=True)
        with open(os.path.join(ROOT, "VERSION")) as f:
            version = f.read().strip()
        self.assertEqual(r.returncode, 0)
        self.assertTrue(r.stdout.startswith("switchboard " + version), r.stdout)

    def test_versions_agree(self):
        # The package's version (debian/changelog's first line) is the tree's.
        with open(os.path.join(ROOT, "debian", "changelog")) as f:
            m = re.match(r"switchboard \(([^)]+)\)", f.readline())
        with open(os.path.join(ROOT, "VERSION")) as f:
            self.assertEqual(m.group(1), f.read().strip())

    def test_units_verify(self):
        for u in UNITS:
            path = os.path.join(self.units, u)
            with open(path) as f:
                text = f.read()
            self.assertNotIn("@", text.replace("$MAINPID", ""), u + ": a placeholder was left")
            self.assertIn(self.bin + " ", text, u + ": ExecStart names the installed binary")
        self.assertIn("-c " + self.config, open(os.path.join(self.units, "switchboard.service")).read())
        if not shutil.which("systemd-analyze"):
            self.fail("systemd-analyze is missing: apt-get install -y systemd (scripts/deps.sh test)")
        # verify exits 0 on unknown keys or bad values: its warnings are the failure.
        r = subprocess.run(["systemd-analyze", "verify", "--man=no"] + [os.path.join(self.units, u) for u in UNITS],
                           capture_output=True, text=True)
        self.assertEqual((r.returncode, r.stdout + r.stderr), (0, ""))

    def test_keeps_operator_config_and_uninstalls(self):
        d = tempfile.mkdtemp(prefix="sb-install2-")
        try:
            v = ["DESTDIR=" + d, "PREFIX=/usr"]
            os.makedirs(os.path.join(d, "etc", "switchboard"))
            mine = os.path.join(d, "etc", "switchboard", "switchboard.yaml")
            with open(mine, "w") as f:
                f.write("# the operator's\n")
            r = make("install", *v)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(mine) as f:
                self.assertEqual(f.read(), "# the operator's\n", "make install kept the existing configuration")
            # PREFIX=/usr puts the configuration in /etc and the units where Debian 12 keeps them.
            for u in UNITS:
                self.assertTrue(os.path.isfile(os.path.join(d, "lib", "systemd", "system", u)), u)
            self.assertTrue(os.path.isfile(os.path.join(d, "usr", "bin", "switchboard")))
            r = make("uninstall", *v)
            self.assertEqual(r.returncode, 0, r.stderr)
            left = sorted(os.path.relpath(os.path.join(p, n), d) for p, _, ns in os.walk(d) for n in ns)
            self.assertEqual(left, ["etc/switchboard/switchboard.yaml"])
        finally:
            shutil.rmtree(d, ignore_errors=True)

    def test_services_as_installed(self):
        """The two services' commands, on free ports: the fleet alone, and the gateway from the
        configuration `demo --print-config` writes for those ports (the same as the installed
        one but for the ports); a chat answered, a reload, a drain."""
        port, admin, sim = free_port(), free_port(), free_run(4)
        kv = free_run(3)
        while (sim <= kv + 2 and kv <= sim + 3) or any(kv <= p <= kv + 2 for p in (port, admin)):
            kv = free_run(3)
        ports = ["--port", str(port), "--admin-port", str(admin), "--sim-port", str(sim), "--kv-port", str(kv)]
        printed = subprocess.run([self.bin, "demo", "--print-config"], capture_output=True, text=True, check=True)
        with open(self.config) as f:
            self.assertEqual(yaml.safe_load(printed.stdout), yaml.safe_load(f),
                             "examples/demo.yaml is what demo --print-config prints")
        cfg = os.path.join(self.dir, "ports.yaml")
        with open(cfg, "w") as f:
            f.write(subprocess.run([self.bin, "demo", "--print-config"] + ports, capture_output=True, text=True,
                                   check=True).stdout)
        logs = os.path.join(self.dir, "logs")
        os.makedirs(logs, exist_ok=True)
        fleet_log, gw_log = open(os.path.join(logs, "fleet"), "w+"), open(os.path.join(logs, "gw"), "w+")
        fleet = subprocess.Popen([self.bin, "demo", "--fleet-only", "--speed", "50"] + ports, stdout=fleet_log,
                                 stderr=subprocess.STDOUT)
        gw = subprocess.Popen([self.bin, "serve", "-c", cfg], stdout=gw_log, stderr=subprocess.STDOUT)
        try:
            def up():
                try:
                    return http(admin, "GET", "/healthz")[0] == 200
                except OSError:
                    return False
            wait_until(up, 10, "the installed gateway's /healthz")
            # (the gateway could bind the demo's ports: --fleet-only started no gateway of its own)
            chat = {"model": "llama-3.1-8b", "stream": True, "max_tokens": 4,
                    "messages": [{"role": "user", "content": "Hello!"}]}
            st, _, body = http(port, "POST", "/v1/chat/completions", json.dumps(chat).encode(),
                               {"Content-Type": "application/json"})
            self.assertEqual(st, 200, body)
            self.assertIn(b"data: [DONE]", body)
            # systemctl reload: the unit checks the file, then sends SIGHUP.
            gw.send_signal(signal.SIGHUP)
            wait_until(lambda: "reload" in open(gw_log.name).read(), 10, "the reload's log line")
            self.assertEqual(http(port, "GET", "/v1/models")[0], 200)
            # systemctl stop: SIGTERM, a drain, exit 0.
            gw.send_signal(signal.SIGTERM)
            self.assertEqual(gw.wait(30), 0, open(gw_log.name).read())
            fleet.send_signal(signal.SIGTERM)
            self.assertEqual(fleet.wait(30), 0, open(fleet_log.name).read())
        finally:
            for p in (gw, fleet):
                if p.poll() is None:
                    p.kill()
                    p.wait()
            fleet_log.close()
            gw_log.close()

    def test_dockerfile_runtime_libraries(self):
        """Each library the binary links directly comes from a package the runtime stage installs."""
        with open(os.path.join(ROOT, "Dockerfile")) as f:
            stages = f.read().split("\nFROM ")
        runtime = stages[-1]
        installed = set(re.findall(r"[a-z0-9][a-z0-9.+-]+", runtime.split("apt-get install", 1)[1].split("&&")[0]))
        r = subprocess.run(["objdump", "-p", self.bin], capture_output=True, text=True, check=True)
        needed = re.findall(r"NEEDED\s+(\S+)", r.stdout)
        self.assertIn("libuv.so.1", needed)
        missing = []
        for lib in needed:
            q = subprocess.run(["dpkg", "-S", "*/" + lib], capture_output=True, text=True)
            self.assertEqual(q.returncode, 0, "no package owns " + lib)
            pkgs = {line.split(":")[0] for line in q.stdout.splitlines()}
            if pkgs & {"libc6"}:
                continue  # in every Debian image
            if not pkgs & installed:
                missing.append((lib, sorted(pkgs)))
        self.assertEqual(missing, [], "the Dockerfile's runtime stage lacks these libraries' packages")


if __name__ == "__main__":
    unittest.main()
