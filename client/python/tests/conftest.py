"""Fixtures: a real tesserad (build/bin/tesserad, CPU backend) on a private ipc
endpoint in a temporary directory, started once per test module, and a client
connected to it. $BUILD names the build folder (default build)."""
import os
import signal
import subprocess
import sys
import tempfile
import time

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))

import tessera  # noqa: E402

BUILD = os.path.join(ROOT, os.environ.get("BUILD", "build"))


class Daemon:
    """tesserad on a fresh ipc socket; wrap is a command that execs the daemon
    command line given after it (e.g. one that changes its mount namespace)."""

    def __init__(self, extra=(), wrap=()):
        self.dir = tempfile.mkdtemp(prefix="tsr-py-")
        self.url = "ipc://" + os.path.join(self.dir, "sock")
        self.log = open(os.path.join(self.dir, "log"), "w+")
        self.proc = subprocess.Popen(
            [*wrap, os.path.join(BUILD, "bin", "tesserad"), "--listen", self.url, "--cache-dir",
             os.path.join(self.dir, "cache"), "--backend", "cpu", "--log-level", "warn",
             *extra], stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while True:
            try:
                with tessera.connect(self.url, timeout_ms=2000) as c:
                    c.hello()
                return
            except tessera.TesseraError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("tesserad did not start: " + self.output())
                time.sleep(0.05)

    def output(self):
        self.log.seek(0)
        return self.log.read()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                return self.proc.wait()
        return self.proc.returncode


def serve(extra=(), wrap=()):
    """The body of a module's daemon fixture (`yield from serve(...)`): a Daemon
    for the module's tests, then stopped, its clean exit asserted."""
    d = Daemon(extra=extra, wrap=wrap)
    yield d
    rc = d.stop()
    assert rc == 0, d.output()


@pytest.fixture(scope="module")
def daemon():
    yield from serve()


@pytest.fixture
def client(daemon):
    with tessera.connect(daemon.url, timeout_ms=30000, force="") as c:
        yield c
