"""`treegraft-lab lab` (`make lab`): JupyterLab on the workbench notebooks, on this machine only.

    treegraft-lab lab               # http://127.0.0.1:8888/lab?token=...
    treegraft-lab lab --port 9000   # or PORT=9000 in the environment (`make lab PORT=9000`)

The server listens on 127.0.0.1 only and asks for a token: a random one per start (or a non-empty
`JUPYTER_TOKEN` from the environment), handed to Jupyter through its environment, so it never shows
in the process list. Before printing the address it checks that the server refuses a request
without the token, and stops it otherwise (a Jupyter config that empties the token). Notebooks run
on this Python (the project's environment): a kernel named `python3` pointing at it comes first on
`JUPYTER_PATH`, whatever other `python3` kernel the user has installed. Ctrl+C stops the server
and its kernels.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from treegraft_lab.errors import TreeGraftError
from treegraft_lab.paths import REPO_DIR

NOTEBOOKS_DIR = REPO_DIR / "notebooks"
HOST = "127.0.0.1"
DEFAULT_PORT = 8888
FIRST_NOTEBOOK = "01_step_through.ipynb"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT") or DEFAULT_PORT),
                        help=f"port on {HOST} (default: $PORT, else {DEFAULT_PORT})")
    parser.add_argument("--notebooks", type=Path, default=NOTEBOOKS_DIR, help="the folder to serve (default: notebooks/)")
    parser.add_argument("--start-timeout", type=float, default=180.0, help="seconds to wait for the server")


def server_command(root: Path, port: int, *extra: str) -> list[str]:
    """JupyterLab serving `root` on 127.0.0.1:`port` with this Python, no browser opened. The token is not in it:
    it goes through the environment (`server_env`)."""
    return [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--ServerApp.ip={HOST}", f"--ServerApp.port={port}",
            "--ServerApp.port_retries=0", "--ServerApp.allow_remote_access=False", f"--ServerApp.root_dir={root}",
            *(["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []), *extra]


def write_kernelspec(folder: Path) -> Path:
    """A Jupyter data folder under `folder` whose `python3` kernel is this Python; returns the data folder."""
    spec = folder / "kernels" / "python3"
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (treegraft-lab)", "language": "python", "metadata": {"debugger": True}}, indent=1))
    return folder


def server_env(token: str, data_dir: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """`base` (default: this process's environment) with the token and the kernel folder `data_dir` first on
    JUPYTER_PATH."""
    if not token:
        raise TreeGraftError("refusing to start JupyterLab without a token")
    env = dict(os.environ if base is None else base)
    env.pop("JUPYTER_TOKEN_FILE", None)
    env["JUPYTER_TOKEN"] = token
    env["JUPYTER_PATH"] = os.pathsep.join([str(data_dir), *filter(None, [env.get("JUPYTER_PATH")])])
    return env


def lab_url(port: int, token: str) -> str:
    return f"http://{HOST}:{port}/lab?token={token}"


def get(port: int, path: str, token: str | None = None, timeout: float = 5.0) -> tuple[int, bytes]:
    """GET `path` from the server (with `token` in the Authorization header, if any); redirects are not
    followed. Returns the status and body."""
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        conn.request("GET", path, headers={"Authorization": f"token {token}"} if token else {})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def checked_root(args: argparse.Namespace) -> Path:
    """The notebooks' folder, resolved; refused in one line when it is missing or the port is bad or taken."""
    root = Path(args.notebooks).resolve()
    if not root.is_dir():
        raise TreeGraftError(f"no folder {root}: pass the notebooks' folder with --notebooks DIR")
    if not 0 < args.port < 65536:
        raise TreeGraftError(f"port {args.port} is not a port number")
    if not port_free(args.port):
        raise TreeGraftError(f"port {args.port} on {HOST} is in use: pick another, e.g. `make lab PORT={args.port + 1}` "
                             f"or `treegraft-lab lab --port {args.port + 1}`")
    return root


def wait_until_up(proc: subprocess.Popen, port: int, token: str, timeout: float, stopping: list) -> None:
    """Poll the server's status with the token until it answers 200 (or a signal stops the wait); refused when
    the server exits first or does not answer within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not stopping:
        if proc.poll() is not None:
            raise TreeGraftError(f"JupyterLab exited with code {proc.returncode} before it answered (its log is above)")
        try:
            if get(port, "/api/status", token, timeout=2)[0] == 200:
                break
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise TreeGraftError(f"JupyterLab did not answer on {HOST}:{port} within {timeout:.0f} s")
        time.sleep(0.3)


def check_token_required(port: int) -> None:
    """Refuse a server that answers a request without the token with anything but 403."""
    status = get(port, "/api/contents/")[0]
    if status != 403:
        raise TreeGraftError(f"the server answered {status} to a request without the token (a Jupyter config "
                             "that disables it?): stopped")


def welcome(root: Path, port: int, token: str) -> str:
    """What `lab` prints once the server is up: where it serves, the address with the token, where to start."""
    return (f"\nThe workbench: JupyterLab on {root}, notebooks run on {sys.executable}.\n"
            f"Open it in a browser on this machine (it listens on {HOST} only):\n\n"
            f"    {lab_url(port, token)}\n\n"
            f"Start with {FIRST_NOTEBOOK}. Ctrl+C stops the server and its kernels.\n")


def wait_for_exit(proc: subprocess.Popen) -> None:
    """Wait for the server to exit, in short waits that signal handlers can interrupt."""
    while proc.poll() is None:
        try:
            proc.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            pass


def stop(proc: subprocess.Popen, grace_s: float = 30) -> None:
    """Stop a server process: terminated, then killed if it is still running after `grace_s`."""
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def shut_down(proc: subprocess.Popen, before: dict, tmp: Path) -> None:
    """Stop the server (killed after 30 s), put the signal handlers back and remove the kernel folder."""
    stop(proc)
    for s, h in before.items():
        signal.signal(s, h)
    shutil.rmtree(tmp, ignore_errors=True)


def run(args: argparse.Namespace) -> int:
    """Check the folder and port, start JupyterLab with a token, check that it asks for it, print the address, wait."""
    root = checked_root(args)
    token = os.environ.get("JUPYTER_TOKEN") or secrets.token_hex(24)
    tmp = Path(tempfile.mkdtemp(prefix="treegraft-lab-jupyter-"))
    stopping = []

    def stop(sig, frame):
        stopping.append(sig)
        if proc.poll() is None:
            proc.terminate()  # Jupyter's clean stop: kernels shut down, then the server

    handled = [s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None]
    before = {s: signal.getsignal(s) for s in handled}
    # its own session: Ctrl+C reaches this process only, which stops the server without Jupyter's y/n prompt
    proc = subprocess.Popen(server_command(root, args.port), env=server_env(token, write_kernelspec(tmp)),
                            stdin=subprocess.DEVNULL, start_new_session=True)
    for s in handled:
        signal.signal(s, stop)
    try:
        wait_until_up(proc, args.port, token, args.start_timeout, stopping)
        if not stopping:
            check_token_required(args.port)
            print(welcome(root, args.port, token), flush=True)
        wait_for_exit(proc)
        return 0 if stopping else proc.returncode
    finally:
        shut_down(proc, before, tmp)
