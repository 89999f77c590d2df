"""The code_tests sandbox against a hostile program (DESIGN.md §6, issue 33).

Each escape test runs a program that really tries the attack and prints what it saw; the test
asserts the specific way the OS sandbox stopped it (an errno, a limit, an absent secret) and that
the service is untouched. Where it matters, a control runs the same program as a plain child of
the service and shows the attack works when nothing stops it, so a green test cannot come from
a probe that never tried.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx
import pytest

from shared.rewards import Sample
from shared.rewards.functions import CodeTests
from shared.rewards.sandbox import UID_POOL, Limits, SandboxConfig, isolation, run_python, runner_app
from shared.runtime.envelope import DependencyUnavailable

ROOT = Path(__file__).resolve().parents[2]
TESTS = "assert add(2, 3) == 5\n"
GOOD = "def add(a, b):\n    return a + b\n"


@pytest.fixture(scope="module")
def isolated() -> SandboxConfig:
    """The default sandbox (bubblewrap), which must work here: CI installs it (make test)."""
    cfg = SandboxConfig()
    if not isolation(cfg.bwrap, cfg.uid_base):
        if os.environ.get("CI"):
            pytest.fail("no OS isolation for code_tests in CI: is bubblewrap installed (make test)?")
        pytest.skip("bubblewrap unavailable here (apt-get install bubblewrap)")
    return cfg


def sandboxed(code: str, cfg: SandboxConfig, **limits: Any) -> tuple[dict[str, Any], Any]:
    r = asyncio.run(run_python(code, Limits(**{"timeout_s": 20.0, **limits}), config=cfg))
    assert r.isolated and not r.timed_out, (r.reason(), r.stderr[-2000:])
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1]), r


def plain(code: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """The control: the same program as an ordinary child of the service."""
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env, cwd="/"
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def survivors(cfg: SandboxConfig) -> list[int]:
    """Host processes running as a sandbox uid (root only: otherwise the uid is our own)."""
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            uid = int(Path(f"/proc/{d}/status").read_text().split("Uid:")[1].split()[0])
        except (OSError, IndexError, ValueError):
            continue
        if cfg.uid_base <= uid < cfg.uid_base + UID_POOL:
            found.append(int(d))
    return found


# ------------------------------------------------------------------ the service's environment
# A service process that holds the secret (in its environment and its argv) and runs the
# program: sandboxed, then as a plain child without the secret in that child's own environment.
SERVICE = r"""
import asyncio, json, os, subprocess, sys
from dataclasses import asdict
from shared.rewards.sandbox import Limits, SandboxConfig, run_python
cfg = SandboxConfig(**json.loads(sys.argv[1]))
code = sys.stdin.read().replace("SERVICE_PID", str(os.getpid()))
r = asyncio.run(run_python(code, Limits(timeout_s=20), config=cfg))
child_env = {k: v for k, v in os.environ.items() if k != "SY_INTERNAL_TOKEN"}
p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=child_env)
print(json.dumps({"pid": os.getpid(), "sandboxed": asdict(r), "plain": p.stdout, "plain_err": p.stderr}))
"""


def as_service(code: str, cfg: SandboxConfig, secret: str) -> dict[str, Any]:
    env = {**os.environ, "SY_INTERNAL_TOKEN": secret}
    r = subprocess.run(
        [sys.executable, "-c", SERVICE, json.dumps(asdict(cfg)), "--token", secret],
        input=code,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr  # the service survived
    return json.loads(r.stdout.strip().splitlines()[-1])


READ_SERVICE_ENV = r"""
import errno, json, os
seen = {}
for name, pid in (("service", SERVICE_PID), ("parent", os.getppid())):
    try:
        seen[name] = open(f"/proc/{pid}/environ", "rb").read().decode("latin-1")
    except OSError as e:
        seen[name] = errno.errorcode.get(e.errno, str(e))
seen["own"] = sorted(os.environ)
seen["ppid"] = os.getppid()
print(json.dumps(seen))
"""


def test_sandbox_cannot_read_the_service_environment(isolated: SandboxConfig) -> None:
    secret = f"sy-secret-{uuid.uuid4().hex}"
    out = as_service(READ_SERVICE_ENV, isolated, secret)
    control = json.loads(out["plain"].strip().splitlines()[-1])
    assert f"SY_INTERNAL_TOKEN={secret}" in control["service"]  # the probe reads it when it can
    box = out["sandboxed"]
    assert box["isolated"] and box["returncode"] == 0, box["stderr"]
    assert secret not in box["stdout"] + box["stderr"]
    seen = json.loads(box["stdout"].strip().splitlines()[-1])
    assert seen["service"] == "ENOENT"  # no such pid in its PID namespace
    assert seen["ppid"] != out["pid"] and seen["ppid"] < 10  # its parent is bwrap's init
    assert "SY_INTERNAL_TOKEN" not in seen["parent"]
    assert set(seen["own"]) <= {"PATH", "HOME", "LANG", "PWD"}  # a clear environment


SCAN_PROC = r"""
import json, os
hits, pids = [], []
for d in os.listdir("/proc"):
    if not d.isdigit():
        continue
    pids.append(int(d))
    for f in ("environ", "cmdline"):
        try:
            data = open(f"/proc/{d}/{f}", "rb").read().replace(b"\0", b" ")
        except OSError:
            continue
        for key in (b"SY_INTERNAL_TOKEN=", b"--token "):
            at = data.find(key)
            if at >= 0:
                hits.append([d, f, data[at:at + 80].decode("latin-1")])
print(json.dumps({"pids": sorted(pids), "hits": hits}))
"""


def test_sandbox_cannot_find_a_secret_by_scanning_proc(isolated: SandboxConfig) -> None:
    secret = f"sy-secret-{uuid.uuid4().hex}"
    out = as_service(SCAN_PROC, isolated, secret)
    control = json.loads(out["plain"].strip().splitlines()[-1])
    assert any(secret in h[2] and h[0] == str(out["pid"]) for h in control["hits"]), control["hits"]
    box = out["sandboxed"]
    assert box["isolated"] and box["returncode"] == 0, box["stderr"]
    assert secret not in box["stdout"] + box["stderr"]
    seen = json.loads(box["stdout"].strip().splitlines()[-1])
    assert seen["hits"] == []
    assert out["pid"] not in seen["pids"] and max(seen["pids"]) < 10  # only its own processes


SIGNAL_SERVICE = r"""
import errno, json, os, signal
res = {"ppid": os.getppid()}
for name, pid in (("service", SERVICE_PID), ("parent", os.getppid())):
    try:
        os.kill(pid, signal.SIGUSR1)
        res["kill " + name] = "sent"
    except OSError as e:
        res["kill " + name] = errno.errorcode[e.errno]
try:
    fd = os.pidfd_open(SERVICE_PID)
    signal.pidfd_send_signal(fd, signal.SIGUSR1)
    res["pidfd"] = "sent"
except OSError as e:
    res["pidfd"] = errno.errorcode[e.errno]
print(json.dumps(res))
"""


def test_sandbox_cannot_signal_or_pidfd_kill_the_service(isolated: SandboxConfig) -> None:
    """SIGUSR1 stands for SIGKILL: the service counts what reaches it and lives to assert it."""
    got: list[int] = []
    old = signal.signal(signal.SIGUSR1, lambda *_: got.append(1))
    try:
        code = SIGNAL_SERVICE.replace("SERVICE_PID", str(os.getpid()))
        control = plain(code)
        time.sleep(0.2)
        assert control["kill service"] == control["pidfd"] == "sent" and got, (control, got)
        got.clear()
        seen, _ = sandboxed(code, isolated)
        time.sleep(0.2)
    finally:
        signal.signal(signal.SIGUSR1, old)
    assert got == [], seen  # nothing reached the service
    assert seen["kill service"] == "ESRCH"  # not in its PID namespace
    assert seen["pidfd"] in ("EPERM", "ESRCH")  # seccomp refuses pidfd_open (ESRCH without it)
    assert seen["ppid"] != os.getpid() and seen["ppid"] < 10  # "parent" is bwrap's init


# ------------------------------------------------------------------ resource bombs
FORK_BOMB = r"""
import errno, json, os, time
n = 0
try:
    while n < 300:
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
        n += 1
    print(json.dumps({"forks": n, "refused": None}))
except OSError as e:
    print(json.dumps({"forks": n, "refused": errno.errorcode[e.errno]}))
"""


def test_sandbox_fork_bomb_hits_the_process_limit_and_dies_with_the_sandbox(isolated: SandboxConfig) -> None:
    seen, r = sandboxed(FORK_BOMB, isolated, max_processes=32)
    assert seen["refused"] == "EAGAIN" and 0 < seen["forks"] < 32, seen  # RLIMIT_NPROC
    assert r.duration_s < 10  # its sleeping children did not keep it alive
    if os.geteuid() == 0:
        assert survivors(isolated) == []  # every child died with the PID namespace
    # The classic bomb, every child forking too: refused (EAGAIN), not a timeout.
    r = asyncio.run(
        run_python("import os\nwhile True:\n    os.fork()\n", Limits(timeout_s=10), config=isolated)
    )
    assert r.returncode == 1 and not r.timed_out and r.duration_s < 5, r.reason()
    assert "BlockingIOError: [Errno 11] Resource temporarily unavailable" in r.stderr
    if os.geteuid() == 0:
        assert survivors(isolated) == []


THREAD_BOMB = r"""
import json, os, threading, time
ts = []
try:
    while len(ts) < 1000:
        t = threading.Thread(target=time.sleep, args=(30,), daemon=True)
        t.start()
        ts.append(t)
    res = {"threads": len(ts), "refused": None}
except RuntimeError as e:
    res = {"threads": len(ts), "refused": str(e)}
print(json.dumps(res), flush=True)
os._exit(0)
"""


def test_sandbox_thread_bomb_hits_the_process_limit(isolated: SandboxConfig) -> None:
    # 2 GiB of address space fits ~250 thread stacks: what stops it at 32 is RLIMIT_NPROC.
    seen, _ = sandboxed(THREAD_BOMB, isolated, max_processes=32, memory_mb=2048)
    assert seen["refused"] == "can't start new thread" and 0 < seen["threads"] < 32, seen


MEMORY_BOMB = r"""
import json
chunks, mb = [], 0
try:
    while mb < 1024:
        chunks.append(bytearray(16 * 1024 * 1024))
        mb += 16
    res = {"mb": mb, "refused": None}
except MemoryError:
    res = {"mb": mb, "refused": "MemoryError"}
chunks.clear()
print(json.dumps(res))
"""


def test_sandbox_memory_bomb_hits_the_address_space_limit(isolated: SandboxConfig) -> None:
    seen, _ = sandboxed(MEMORY_BOMB, isolated, memory_mb=128)
    assert seen["refused"] == "MemoryError" and seen["mb"] < 128, seen
    fn = CodeTests(sandbox=isolated)
    s = Sample("write add", "x = bytearray(4 * 1024**3)\n" + GOOD, {"tests": TESTS})
    got = asyncio.run(fn.score([s], {"memory_mb": "256"}))[0]
    assert got.value == 0.0 and got.note.endswith("MemoryError"), got.note


# ------------------------------------------------------------------ network and files
CONNECT = r"""
import errno, json, socket
out = {}
for name, addr in (("service", ("127.0.0.1", PORT)), ("internet", ("1.1.1.1", 53))):
    try:
        socket.create_connection(addr, timeout=2).close()
        out[name] = "connected"
    except OSError as e:
        out[name] = errno.errorcode.get(e.errno or 0, type(e).__name__)
out["interfaces"] = [ln.split(":")[0].strip() for ln in open("/proc/net/dev").read().splitlines()[2:]]
print(json.dumps(out))
"""


def _accepted(srv: socket.socket) -> bool:
    try:
        conn, _ = srv.accept()
    except BlockingIOError:
        return False
    conn.close()
    return True


def test_sandbox_has_no_network(isolated: SandboxConfig) -> None:
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(8)
        srv.setblocking(False)
        code = CONNECT.replace("PORT", str(srv.getsockname()[1]))
        control = plain(code)
        assert control["service"] == "connected" and _accepted(srv)  # the probe connects when it can
        seen, _ = sandboxed(code, isolated)
        time.sleep(0.1)
        assert not _accepted(srv)  # nothing came from the sandbox
    assert seen["service"] == "ECONNREFUSED"  # its own loopback, where nothing listens
    assert seen["internet"] in ("ENETUNREACH", "EHOSTUNREACH"), seen
    assert seen["interfaces"] == ["lo"]  # a network namespace of its own


WRITE = r"""
import errno, json
out = {}
for path in TARGETS:
    try:
        with open(path, "w") as f:
            f.write("escaped")
        out[path] = "written"
    except OSError as e:
        out[path] = errno.errorcode[e.errno]
print(json.dumps(out))
"""


def test_sandbox_cannot_write_outside(isolated: SandboxConfig, tmp_path: Path) -> None:
    host_tmp = f"/tmp/sy-escape-{uuid.uuid4().hex}"
    victim = str(tmp_path / "victim.txt")
    in_prefix = str(Path(sys.prefix) / f"sy-escape-{uuid.uuid4().hex}")
    targets = [host_tmp, victim, in_prefix, "scratch.txt"]
    # Control: a plain child writes the service's files (only those two: never /usr as root).
    control = plain(WRITE.replace("TARGETS", repr([host_tmp, victim])))
    assert control == {host_tmp: "written", victim: "written"}
    os.unlink(host_tmp)
    os.unlink(victim)
    seen, _ = sandboxed(WRITE.replace("TARGETS", repr(targets)), isolated)
    assert seen[host_tmp] == "written"  # into its private /tmp...
    assert not Path(host_tmp).exists()  # ...which is not the host's
    assert seen[victim] == "ENOENT" and not Path(victim).exists()  # the service's dirs are not there
    assert seen[in_prefix] in ("EROFS", "EACCES") and not Path(in_prefix).exists()  # read-only binds
    assert seen["scratch.txt"] == "written"  # its own working dir is writable


KERNEL_SURFACE = r"""
import ctypes, json, os, socket
libc = ctypes.CDLL(None, use_errno=True)
def call(name, *args):
    rc = getattr(libc, name)(*args)
    return "ok" if rc >= 0 else os.strerror(ctypes.get_errno())
out = {"mode": open("/proc/self/status").read().split("Seccomp:")[1].split()[0]}
out["ptrace"] = call("ptrace", 0, 0, 0, 0)  # PTRACE_TRACEME
out["unshare"] = call("unshare", 0x10000000)  # CLONE_NEWUSER
out["io_uring_setup"] = call("syscall", 425, 1, ctypes.create_string_buffer(120))
try:
    socket.socket(socket.AF_NETLINK, socket.SOCK_RAW).close()
    out["netlink"] = "ok"
except OSError as e:
    out["netlink"] = os.strerror(e.errno)
print(json.dumps(out))
"""


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the seccomp table is x86_64's")
def test_sandbox_seccomp_refuses_kernel_surface(isolated: SandboxConfig) -> None:
    control = plain(KERNEL_SURFACE)
    assert control["ptrace"] == control["netlink"] == "ok"  # each call works outside
    seen, _ = sandboxed(KERNEL_SURFACE, isolated)
    assert seen["mode"] == "2"  # SECCOMP_MODE_FILTER
    assert seen["ptrace"] == seen["unshare"] == seen["io_uring_setup"] == "Operation not permitted"
    assert seen["netlink"] == "Address family not supported by protocol"


# ------------------------------------------------------------------ failing closed
def test_code_tests_answers_sandbox_unavailable_without_isolation(monkeypatch: pytest.MonkeyPatch) -> None:
    s = Sample("write add", GOOD, {"tests": TESTS})
    refused = CodeTests(sandbox=SandboxConfig(bwrap="/nonexistent/bwrap"))
    got = asyncio.run(refused.score([s], {}))[0]
    assert (got.value, got.note) == (0.0, "sandbox_unavailable")
    r = asyncio.run(run_python("print('ran')", config=SandboxConfig(bwrap="/nonexistent/bwrap")))
    assert r.unavailable and r.returncode is None and r.stdout == ""  # never started
    # The same through the settings (SY_SANDBOX_BWRAP), as the reward service reads them.
    from shared.runtime.config import get_settings

    monkeypatch.setenv("SY_SANDBOX_BWRAP", "/nonexistent/bwrap")
    get_settings.cache_clear()
    try:
        got = asyncio.run(CodeTests().score([s], {}))[0]
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()
    assert (got.value, got.note) == (0.0, "sandbox_unavailable")
    # SY_SANDBOX_ALLOW_WEAK=true: the weak path runs it (rlimits and the audit hook only).
    weak = SandboxConfig(bwrap="/nonexistent/bwrap", allow_weak=True)
    got = asyncio.run(CodeTests(sandbox=weak).score([s], {}))[0]
    assert (got.value, got.note) == (1.0, "passed")
    r = asyncio.run(run_python("print('ran')", config=weak))
    assert r.stdout == "ran\n" and not r.isolated


# ------------------------------------------------------------------ the runner (Kubernetes)
def test_runner_serves_programs_and_is_not_ready_without_isolation(isolated: SandboxConfig) -> None:
    async def main() -> None:
        transport = httpx.ASGITransport(app=runner_app(isolated))
        async with httpx.AsyncClient(transport=transport, base_url="http://runner") as c:
            assert (await c.get("/readyz")).status_code == 200
            r = await c.post(
                "/run", json={"code": "import os; print(os.getpid())", "limits": {"timeout_s": 5}}
            )
            assert r.status_code == 200 and r.json()["isolated"] and int(r.json()["stdout"]) < 10
            bad = await c.post("/run", json={"code": "1", "limits": {"memory_mb": 10**6}})
            assert bad.status_code == 400 and "memory_mb" in bad.json()["error"]
        transport = httpx.ASGITransport(app=runner_app(SandboxConfig(bwrap="/nonexistent/bwrap")))
        async with httpx.AsyncClient(transport=transport, base_url="http://runner") as c:
            r = await c.get("/readyz")
            assert r.status_code == 503 and r.json()["status"] == "sandbox_unavailable"
            r = await c.post("/run", json={"code": "print(1)"})
            assert r.json()["unavailable"] and r.json()["returncode"] is None

    asyncio.run(main())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_code_tests_through_a_runner_process(isolated: SandboxConfig) -> None:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SY_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "shared.rewards.sandbox", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "runner did not start"
            time.sleep(0.2)
        fn = CodeTests(sandbox=SandboxConfig(url=url))
        good = Sample("write add", GOOD, {"tests": TESTS})
        bad = Sample("write add", "def add(a, b):\n    return a - b\n", {"tests": TESTS})
        got = asyncio.run(fn.score([good, bad], {}))
        assert (got[0].value, got[0].note) == (1.0, "passed")
        assert got[1].value == 0.0 and "AssertionError" in got[1].note
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    # A runner that cannot be reached is an outage (the bus retries), never a 0 score.
    with pytest.raises(DependencyUnavailable) as ei:
        asyncio.run(CodeTests(sandbox=SandboxConfig(url=url)).score([good], {}))
    assert ei.value.dependency == "sandbox"


# ------------------------------------------------------------------ a service that is not root
NOT_ROOT = r"""
import asyncio, json, os, sys
from shared.rewards.sandbox import Limits, SandboxConfig, isolation, run_python
cfg = SandboxConfig()
layers = isolation(cfg.bwrap, cfg.uid_base)
probe = "import json, os; print(json.dumps({'pid': os.getpid(), 'uid': os.getuid()}))"
r1 = asyncio.run(run_python(probe, config=cfg))
r2 = asyncio.run(run_python(sys.stdin.read(), Limits(max_processes=16, timeout_s=20), config=cfg))
print(json.dumps({"layers": layers, "probe": r1.stdout, "bomb": r2.stdout, "err": r2.stderr[-500:]}))
"""


def test_sandbox_isolates_when_the_service_is_not_root(isolated: SandboxConfig) -> None:
    """The Kubernetes runner is not root: bwrap then builds a user namespace (uid 65534 inside)."""
    if os.geteuid() != 0:
        pytest.skip("already not root: every other test covers this path")
    system = Path("/usr/bin/python3")
    same = subprocess.run(
        [str(system), "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True
    )
    if not system.exists() or same.stdout.strip() != str(sys.version_info[:2]):
        pytest.skip("needs a /usr/bin/python3 of this Python version (the venv's is root-only here)")
    site = [p for p in sys.path if p.endswith("site-packages")]
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "proto"), *site])}
    r = subprocess.run(
        [str(system), "-c", NOT_ROOT],
        input=FORK_BOMB,
        user=65534,
        group=65534,
        extra_groups=[],
        env=env,
        cwd="/",
        capture_output=True,
        text=True,
        timeout=120,
    )
    if r.returncode != 0 and "Permission denied" in r.stderr:
        pytest.skip(f"the checkout is not readable by nobody: {r.stderr[-200:]}")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert any("userns" in layer for layer in out["layers"]), out
    probe = json.loads(out["probe"])
    assert probe["pid"] < 10 and probe["uid"] == 65534
    bomb = json.loads(out["bomb"].strip().splitlines()[-1])
    assert bomb["refused"] == "EAGAIN" and bomb["forks"] < 16, out
