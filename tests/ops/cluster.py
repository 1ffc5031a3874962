"""Real processes for operations tests and the fault drill: gateway replicas (`gwctl serve`), a
balancer in front of them (nginx with deploy/nginx.conf, or HAProxy with deploy/haproxy.cfg), fake upstreams, and private Redis and PostgreSQL
instances on free ports in a temporary directory (never the machine's shared ones).

Every process runs in its own session, so `kill()` reaches whatever it started, and logs to a file
in the run's directory (`log_tail()` says why it died)."""

from __future__ import annotations

import csv
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from pathlib import Path

import httpx

from tests.ports import free_port  # noqa: F401 - the drill and the ops tests import it from here

ROOT = Path(__file__).resolve().parents[2]
NGINX_CONF = ROOT / "deploy" / "nginx.conf"
HAPROXY_CFG = ROOT / "deploy" / "haproxy.cfg"
BALANCERS = ("nginx", "haproxy")


def _pg_bin() -> Path:
    """$GW_PG_BIN, else the newest Debian PostgreSQL's binaries (initdb is not on PATH there)."""
    if os.environ.get("GW_PG_BIN"):
        return Path(os.environ["GW_PG_BIN"])
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parts[-3]) if p.parts[-3].isdigit() else 0)
    return found[-1].parent if found else Path("/usr/lib/postgresql/15/bin")


PG_BIN = _pg_bin()


def balancer_binary(kind: str) -> str | None:
    """Debian's nginx or haproxy (in /usr/sbin, which a non-root PATH may lack)."""
    return shutil.which(kind) or next((p for p in (f"/usr/sbin/{kind}",) if os.access(p, os.X_OK)), None)


def nginx_binary() -> str | None:
    return balancer_binary("nginx")


class Proc:
    """A child process in its own session, logging to `<dir>/<name>.log` (appended across restarts)."""

    def __init__(self, name: str, cmd: Sequence[str], workdir: Path, env: dict[str, str] | None = None) -> None:
        self.name, self.cmd, self.workdir = name, list(cmd), workdir
        self.env = {**os.environ, **(env or {})}
        self.log = workdir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Proc:
        if self.proc is not None:  # a restart: reap the one before (a kill may not have been waited for)
            with suppress(subprocess.TimeoutExpired):
                self.proc.wait(10)
            assert self.proc.returncode is not None, f"{self.name} is still running"
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                self.cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
                env=self.env, start_new_session=True,
            )
        return self

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.proc is not None:
            with suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)

    def wait(self, timeout: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def kill(self) -> None:
        """SIGKILL the whole group (idempotent)."""
        if self.proc is None:
            return
        self.signal(signal.SIGKILL)
        with suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)

    def stop(self, grace: float = 10.0) -> None:
        if self.alive:
            self.signal(signal.SIGTERM)
            with suppress(subprocess.TimeoutExpired):
                self.wait(grace)
        self.kill()

    def log_tail(self, lines: int = 30) -> str:
        with suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def wait_until(self, ready: Callable[[], bool], timeout: float, what: str) -> float:
        """Seconds until `ready()` held; raises with the log's tail if the process died or took too long."""
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            if not self.alive:
                raise RuntimeError(f"{self.name} exited ({self.proc and self.proc.returncode}):\n{self.log_tail()}")
            with suppress(Exception):
                if ready():
                    return time.monotonic() - start
            time.sleep(0.05)
        raise TimeoutError(f"{self.name} was not {what} after {timeout:.0f} s:\n{self.log_tail()}")


def port_open(port: int) -> bool:
    with suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
        return True
    return False


class Gateway(Proc):
    """`gwctl serve -c config --port port`; `start()` again after it stopped restarts it on its port."""

    def __init__(self, name: str, config: Path, port: int, workdir: Path, env: dict[str, str] | None = None) -> None:
        cmd = [sys.executable, "-m", "gateway.cli.gwctl", "serve", "-c", str(config), "--port", str(port)]
        super().__init__(name, cmd, workdir, {"PYTHONPATH": str(ROOT), **(env or {})})
        self.port = port
        self.url = f"http://127.0.0.1:{port}"

    def ready(self) -> bool:
        return httpx.get(self.url + "/readyz", timeout=1.0).status_code == 200

    def wait_ready(self, timeout: float = 60.0) -> float:
        return self.wait_until(self.ready, timeout, "ready")


class FakeUpstream(Proc):
    """tests/fakes/openai_upstream.py in its own process (`args`: its command-line options)."""

    def __init__(self, name: str, port: int, workdir: Path, args: Sequence[str] = ()) -> None:
        super().__init__(name, [sys.executable, "-m", "tests.fakes.openai_upstream", "--port", str(port), *args], workdir,
                         {"PYTHONPATH": str(ROOT)})
        self.port = port
        self.url = f"http://127.0.0.1:{port}/v1"

    def wait_ready(self, timeout: float = 30.0) -> float:
        return self.wait_until(lambda: port_open(self.port), timeout, "listening")


def render_nginx(listen_port: int, upstream_ports: Sequence[int], workdir: Path) -> Path:
    """deploy/nginx.conf with this run's replicas and port, inside a main context of its own."""
    site = NGINX_CONF.read_text()
    server_line = re.search(r"^(\s*)server gateway:8080(.*);$", site, re.MULTILINE)
    assert server_line, "deploy/nginx.conf has no `server gateway:8080 ...;` line"
    indent, params = server_line.group(1), server_line.group(2)
    servers = "\n".join(f"{indent}server 127.0.0.1:{p}{params};" for p in upstream_ports)
    site = site[: server_line.start()] + servers + site[server_line.end():]
    site, n = re.subn(r"listen 8080;", f"listen 127.0.0.1:{listen_port};", site)
    assert n == 1, "deploy/nginx.conf has no `listen 8080;`"
    temp = workdir / "nginx-temp"
    temp.mkdir(exist_ok=True)
    conf = workdir / "nginx.conf"
    conf.write_text(
        f"worker_processes 1;\npid {workdir}/nginx.pid;\nerror_log {workdir}/nginx-error.log warn;\n"
        "events { worker_connections 4096; }\n"
        f"http {{\n  access_log off;\n  client_body_temp_path {temp}/body;\n  proxy_temp_path {temp}/proxy;\n"
        f"  fastcgi_temp_path {temp}/fcgi;\n  uwsgi_temp_path {temp}/uwsgi;\n  scgi_temp_path {temp}/scgi;\n"
        f"{site}\n}}\n"
    )
    return conf


class Balancer(Proc):
    """A balancer listening on `port` in front of the replicas on `upstream_ports`."""

    port: int
    url: str

    def start(self) -> Balancer:
        super().start()
        return self

    def in_rotation(self, port: int) -> bool:
        """Whether the balancer sends new requests to the replica on `port`."""
        return True

    def wait_in_rotation(self, port: int, timeout: float) -> float:
        return self.wait_until(lambda: self.in_rotation(port), timeout, f"sending to {port}")

    def wait_ready(self, timeout: float = 15.0) -> float:
        return self.wait_until(lambda: port_open(self.port), timeout, "listening")


class Nginx(Balancer):
    """nginx checks its upstreams passively: a replica that accepts connections is in rotation."""

    def __init__(self, port: int, upstream_ports: Sequence[int], workdir: Path) -> None:
        binary = nginx_binary()
        assert binary, "nginx is not installed (scripts/test.sh installs it)"
        conf = render_nginx(port, upstream_ports, workdir)
        # As root, the workers drop to the compiled-in user (nobody); the temp dir must be theirs.
        super().__init__("nginx", [binary, "-e", str(workdir / "nginx-error.log"), "-c", str(conf), "-g", "daemon off;"],
                         workdir)
        self.port = port
        self.url = f"http://127.0.0.1:{port}"

    def start(self) -> Nginx:
        if os.getuid() == 0:
            with suppress(KeyError, OSError):
                import pwd

                nobody = pwd.getpwnam("nobody")
                os.chown(self.workdir / "nginx-temp", nobody.pw_uid, nobody.pw_gid)
        super().start()
        return self


def render_haproxy(listen_port: int, upstream_ports: Sequence[int], workdir: Path) -> Path:
    """deploy/haproxy.cfg with this run's replicas and port, and a stats socket for `in_rotation`."""
    cfg = HAPROXY_CFG.read_text()
    template = re.search(r"^(\s*)server-template gateway \d+ gateway:8080 .*$", cfg, re.MULTILINE)
    assert template, "deploy/haproxy.cfg has no `server-template gateway N gateway:8080 ...` line"
    servers = "\n".join(f"{template.group(1)}server gw{p} 127.0.0.1:{p}" for p in upstream_ports)
    cfg = cfg[: template.start()] + servers + cfg[template.end():]
    cfg, n = re.subn(r"^(\s*)bind :8080$", rf"\g<1>bind 127.0.0.1:{listen_port}", cfg, flags=re.MULTILINE)
    assert n == 1, "deploy/haproxy.cfg has no `bind :8080`"
    cfg, n = re.subn(r"^global$", f"global\n  stats socket {workdir}/haproxy.sock mode 600 level admin", cfg,
                     flags=re.MULTILINE)
    assert n == 1, "deploy/haproxy.cfg has no global section"
    conf = workdir / "haproxy.cfg"
    conf.write_text(cfg)
    return conf


class HAProxy(Balancer):
    """HAProxy checks /readyz actively: a replica is in rotation once its server is UP."""

    def __init__(self, port: int, upstream_ports: Sequence[int], workdir: Path) -> None:
        binary = balancer_binary("haproxy")
        assert binary, "haproxy is not installed (scripts/test.sh installs it)"
        conf = render_haproxy(port, upstream_ports, workdir)
        super().__init__("haproxy", [binary, "-db", "-f", str(conf)], workdir)  # -db: foreground
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.socket = workdir / "haproxy.sock"

    def server_states(self) -> dict[str, str]:
        """Server name -> status (UP, DOWN, ...), from the stats socket's `show stat`."""
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(2.0)
            sock.connect(str(self.socket))
            sock.sendall(b"show stat\n")
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        rows = csv.DictReader(data.decode().lstrip("# ").splitlines())
        return {r["svname"]: r["status"] for r in rows if r["svname"] not in ("FRONTEND", "BACKEND")}

    def in_rotation(self, port: int) -> bool:
        return self.server_states().get(f"gw{port}", "").startswith("UP")


def make_balancer(kind: str, port: int, upstream_ports: Sequence[int], workdir: Path) -> Balancer:
    if kind == "haproxy":
        return HAProxy(port, upstream_ports, workdir)
    assert kind == "nginx", kind
    return Nginx(port, upstream_ports, workdir)


class Redis(Proc):
    """A private redis-server: loopback, a free port, no persistence (`--save ''`)."""

    def __init__(self, port: int, workdir: Path) -> None:
        cmd = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
               "--dir", str(workdir)]
        super().__init__("redis", cmd, workdir)
        self.port = port
        self.url = f"redis://127.0.0.1:{port}/0"

    def wait_ready(self, timeout: float = 15.0) -> float:
        def pong() -> bool:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(64).startswith(b"+PONG")

        return self.wait_until(pong, timeout, "answering PING")


class Postgres:
    """A private PostgreSQL cluster (initdb into a directory of its own, trust auth on loopback).
    As root it runs as the `postgres` user (initdb refuses root), in a directory under the system's
    temporary directory that this user can reach; `cleanup()` removes it."""

    def __init__(self, port: int, *, fsync: bool = False) -> None:
        self.port = port
        self.fsync = fsync  # off for tests and the drill (no disk flushes); on to measure capacity
        self.root = Path(tempfile.mkdtemp(prefix="gw-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "postgres.log"
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
        self._as = ["runuser", "-u", "postgres", "--"] if os.getuid() == 0 else []

    def _pg(self, tool: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*self._as, str(PG_BIN / tool), *args], capture_output=True, text=True)

    def init(self) -> Postgres:
        if os.getuid() == 0:
            import pwd

            pg = pwd.getpwnam("postgres")
            os.chown(self.root, pg.pw_uid, pg.pw_gid)
        done = self._pg("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed: {done.stderr[-2000:]}")
        return self

    def start(self) -> Postgres:
        fsync = "on" if self.fsync else "off"
        opts = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync={fsync} -c max_connections=50"
        done = self._pg("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", opts, "-w", "-t", "60", "start")
        if done.returncode != 0:
            raise RuntimeError(f"pg_ctl start failed: {done.stderr[-2000:]}\n{self.log_tail()}")
        return self

    def stop(self, mode: str = "fast") -> None:
        """`immediate`: as abrupt as a crash (no checkpoint; recovery on the next start)."""
        self._pg("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    @property
    def running(self) -> bool:
        return self._pg("pg_ctl", "-D", str(self.data), "status").returncode == 0

    def cleanup(self) -> None:
        if self.data.exists() and self.running:
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    def log_tail(self, lines: int = 20) -> str:
        with suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def psql(self, sql: str) -> str:
        out = subprocess.run([str(PG_BIN / "psql"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-Atqc",
                              sql, "postgres"], check=True, capture_output=True, text=True)
        return out.stdout.strip()
