"""Shared fixtures: the exlr8d binaries and the shared fixture release, a
hub simulator serving it, a cache with TP 3 rank 1 pulled into it, and
holders (exlr8d-stage --memory host --hold) over that cache.

EXLR8_BIN_DIR names the directory of exlr8d, exlr8d-stage and exlr8-hubsim
(default: the repository's build/bin); EXLR8_FIXTURE the release (default:
../shared/fixtures/exlr8-tiny beside the repository). Tests that need them
skip, saying so, when they are missing.
"""

import os
import pathlib
import select
import signal
import subprocess
import sys
import time

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
REPO = HERE.parent.parent


def _bin_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("EXLR8_BIN_DIR", REPO / "build" / "bin"))


def _fixture() -> pathlib.Path:
    return pathlib.Path(os.environ.get("EXLR8_FIXTURE", REPO.parent / "shared" / "fixtures" / "exlr8-tiny"))


def binary(name: str) -> str:
    p = _bin_dir() / name
    if not os.access(p, os.X_OK):
        pytest.skip(f"{p} is not built (set EXLR8_BIN_DIR)")
    return str(p)


class Process:
    """A child whose combined output is read as it comes."""

    def __init__(self, args, log: pathlib.Path):
        self.args = args
        self.log = log
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.out = b""

    def read_until(self, text: str, timeout: float = 60) -> bool:
        end = time.monotonic() + timeout
        while text.encode() not in self.out:
            left = end - time.monotonic()
            if left <= 0:
                return False
            r, _, _ = select.select([self.proc.stdout], [], [], left)
            if r:
                chunk = os.read(self.proc.stdout.fileno(), 65536)
                if not chunk:
                    return text.encode() in self.out
                self.out += chunk
        return True

    @property
    def printed(self) -> str:
        return self.out.decode(errors="replace")

    def stop(self, sig=signal.SIGTERM, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        if self.proc.stdout.closed:
            return rc
        rest = self.proc.stdout.read()
        self.proc.stdout.close()
        if rest:
            self.out += rest
        self.log.write_bytes(self.out)
        return rc


@pytest.fixture(scope="session")
def hub(tmp_path_factory):
    fixture = _fixture()
    if not fixture.is_dir():
        pytest.skip(f"the shared fixture {fixture} is missing (set EXLR8_FIXTURE)")
    work = tmp_path_factory.mktemp("hub")
    port_file = work / "ports"
    p = Process([binary("exlr8-hubsim"), "--repo", f"exlr8/test={fixture}", "--port-file", str(port_file)],
                work / "hubsim.log")
    end = time.monotonic() + 30
    while not (port_file.exists() and port_file.read_text().strip()):
        assert p.proc.poll() is None and time.monotonic() < end, "exlr8-hubsim did not start"
        time.sleep(0.05)
    fields = dict(kv.split("=", 1) for kv in port_file.read_text().split())
    yield fields["hub"]
    p.stop()


@pytest.fixture(scope="session")
def cache(hub, tmp_path_factory):
    """A cache with exlr8/test home TP 3 rank 1 pulled (by exlr8d pull)."""
    c = tmp_path_factory.mktemp("cache")
    r = subprocess.run([binary("exlr8d"), "pull", "--repo", "exlr8/test", "--manifest", "home", "--tp", "3",
                        "--rank", "1", "--endpoint", hub, "--cache", str(c), "--no-progress"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return c


@pytest.fixture
def start_holder(cache, tmp_path):
    """start_holder(release_wait=20) -> (Process, socket path): a host-memory
    holder of TP 3 rank 1, holding."""
    started = []

    def start(release_wait=20, tp=3, rank=1):
        sock = tmp_path / f"lease{len(started)}.sock"
        p = Process([binary("exlr8d-stage"), "--cache", str(cache), "--repo", "exlr8/test", "--manifest", "home",
                     "--tp", str(tp), "--rank", str(rank), "--memory", "host", "--hold", str(sock),
                     "--release-wait", str(release_wait)], tmp_path / f"stage{len(started)}.log")
        started.append(p)
        assert p.read_until("holding:"), p.printed
        return p, str(sock)

    yield start
    for p in started:
        p.stop(signal.SIGKILL if p.proc.poll() is None else signal.SIGTERM)
