"""`make lab`: JupyterLab on the notebooks, on 127.0.0.1 only, behind a token, with the project's Python as kernel.

The slow test starts it exactly as `make lab` does (the `setup` step taken as done), on a free port, with Jupyter's
user folders in a temporary directory, and stops it as Ctrl+C in a terminal does.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.test_notebooks import NOTEBOOKS
from treegraft_lab.commands import lab

REPO = Path(__file__).resolve().parent.parent
ENV_BIN = Path(sys.executable).parent  # the project environment's bin/ (.venv/bin under `make`)


def test_the_server_command_binds_localhost_and_keeps_the_token_out_of_the_process_list(tmp_path):
    cmd = lab.server_command(tmp_path, 8888)
    assert "--ServerApp.ip=127.0.0.1" in cmd and "--ServerApp.port=8888" in cmd and "--ServerApp.port_retries=0" in cmd
    assert not [a for a in cmd if "token" in a.lower()]
    env = lab.server_env("abc", lab.write_kernelspec(tmp_path), {"JUPYTER_PATH": "/elsewhere", "JUPYTER_TOKEN_FILE": "f"})
    assert env["JUPYTER_TOKEN"] == "abc" and "JUPYTER_TOKEN_FILE" not in env
    assert env["JUPYTER_PATH"].split(os.pathsep) == [str(tmp_path), "/elsewhere"]
    spec = json.loads((tmp_path / "kernels" / "python3" / "kernel.json").read_text())
    assert spec["argv"][0] == sys.executable
    with pytest.raises(ValueError, match="without a token"):
        lab.server_env("", tmp_path)


def test_a_busy_port_is_refused_naming_another(tmp_path):
    from treegraft_lab import cli

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert cli.main(["lab", "--port", str(port)]) == 2


def listeners(port: int) -> list[str]:
    """The local addresses of every TCP socket listening on `port` (Linux /proc/net), as ip strings."""
    out = []
    for name in ("tcp", "tcp6"):
        path = Path("/proc/net") / name
        for line in path.read_text().splitlines()[1:] if path.exists() else []:
            local, state = line.split()[1], line.split()[3]
            addr, p = local.split(":")
            if state == "0A" and int(p, 16) == port:
                raw = bytes.fromhex(addr)
                words = [raw[i:i + 4][::-1] for i in range(0, len(raw), 4)]  # each 32-bit word in host (little-endian) order
                out.append(socket.inet_ntop(socket.AF_INET if len(raw) == 4 else socket.AF_INET6, b"".join(words)))
    return out


def kernel_processes(kernel_id: str) -> list[int]:
    """The pids whose command line names the kernel's connection file."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and f"kernel-{kernel_id}.json" in (proc / "cmdline").read_bytes().decode(errors="replace"):
                pids.append(int(proc.name))
        except OSError:
            pass
    return pids


def post(port: int, path: str, token: str) -> dict:
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("POST", path, body=json.dumps({"name": "python3"}), headers={"Authorization": f"token {token}"})
        resp = conn.getresponse()
        assert resp.status == 201, (resp.status, resp.read()[:200])
        return json.loads(resp.read())
    finally:
        conn.close()


@pytest.mark.slow
@pytest.mark.skipif(not shutil.which("make") or not Path("/proc/net/tcp").exists(), reason="needs make and Linux")
def test_make_lab_serves_the_notebooks_on_localhost_behind_a_token(tmp_path):
    port = lab_free_port()
    env = {**os.environ, **{k: str(tmp_path / k.lower()) for k in
                            ("JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR", "IPYTHONDIR")}}
    env.pop("JUPYTER_TOKEN", None)
    log = open(tmp_path / "lab.log", "w")
    t0 = time.perf_counter()
    # `make lab` as typed, minus the venv step (-o: the stamp counts as up to date; `make test` built it)
    proc = subprocess.Popen(["make", "-s", "-o", ".venv/.installed", "lab", f"PORT={port}"], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=log, text=True, start_new_session=True)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()
    printed, url = [], None
    try:
        deadline = time.monotonic() + 240
        while url is None and time.monotonic() < deadline and proc.poll() is None:
            try:
                printed.append(lines.get(timeout=1))
            except queue.Empty:
                continue
            m = re.search(rf"http://127\.0\.0\.1:{port}/lab\?token=(\w+)", printed[-1])
            url = m and m.group(0)
        assert url, f"no address printed: {printed}; see {tmp_path / 'lab.log'}"
        token = url.split("token=")[1]
        started = time.perf_counter() - t0

        status, body = lab.get(port, f"/lab?token={token}")
        assert status == 200 and b"JupyterLab" in body
        status, body = lab.get(port, "/api/contents/", token)
        assert status == 200
        listed = sorted(x["name"] for x in json.loads(body)["content"] if x["type"] == "notebook")
        assert listed == NOTEBOOKS and len(listed) == 8, listed

        for path in ("/api/contents/", "/api/kernelspecs", "/api/status"):  # no token, a wrong one
            assert lab.get(port, path)[0] == 403, path
            assert lab.get(port, path, "not-" + token)[0] == 403, path
        status, _ = lab.get(port, "/lab")
        assert status in (302, 403)  # to the login page
        assert listeners(port) == ["127.0.0.1"], listeners(port)

        specs = json.loads(lab.get(port, "/api/kernelspecs", token)[1])
        assert Path(specs["kernelspecs"]["python3"]["spec"]["argv"][0]).parent == ENV_BIN, specs["kernelspecs"]["python3"]
        kernel = post(port, "/api/kernels", token)  # a kernel started as a notebook starts it: the project's Python
        for _ in range(100):
            pids = kernel_processes(kernel["id"])
            if pids:
                break
            time.sleep(0.2)
        argv0 = [Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[0].decode() for p in pids]
        assert pids and all(Path(a).parent == ENV_BIN for a in argv0), argv0
    finally:
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl+C in the terminal
        t1 = time.perf_counter()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail("make lab did not stop within 60 s of Ctrl+C")
        finally:
            log.close()
    stopped = time.perf_counter() - t1
    assert not listeners(port), "the server still listens after Ctrl+C"
    for _ in range(50):
        if not kernel_processes(kernel["id"]):
            break
        time.sleep(0.2)
    assert not kernel_processes(kernel["id"]), "the kernel outlived the server"
    text = (tmp_path / "lab.log").read_text()
    assert "Shutting down 1 kernel" in text or "Kernel shutdown" in text, text[-2000:]
    print(f"make lab: answered in {started:.1f} s, stopped in {stopped:.1f} s")


def lab_free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_welcome_names_the_folder_the_python_and_the_address_with_its_token(tmp_path):
    text = lab.welcome(tmp_path, 9000, "abc123")
    assert f"JupyterLab on {tmp_path}, notebooks run on {sys.executable}." in text
    assert "\n    http://127.0.0.1:9000/lab?token=abc123\n" in text and f"Start with {lab.FIRST_NOTEBOOK}." in text


def test_a_missing_notebooks_folder_or_a_bad_port_is_refused_before_any_server_starts(tmp_path):
    from types import SimpleNamespace

    from treegraft_lab.errors import TreeGraftError

    with pytest.raises(TreeGraftError, match="no folder .*--notebooks DIR"):
        lab.checked_root(SimpleNamespace(notebooks=tmp_path / "nope", port=9000))
    with pytest.raises(TreeGraftError, match="port 70000 is not a port number"):
        lab.checked_root(SimpleNamespace(notebooks=tmp_path, port=70000))
    with socket.socket() as s:
        s.bind((lab.HOST, 0))
        taken = s.getsockname()[1]
        with pytest.raises(TreeGraftError, match=f"port {taken} on 127.0.0.1 is in use"):
            lab.checked_root(SimpleNamespace(notebooks=tmp_path, port=taken))
    assert lab.checked_root(SimpleNamespace(notebooks=str(tmp_path), port=lab_free_port())) == tmp_path.resolve()
