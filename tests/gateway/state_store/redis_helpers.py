"""Redis for the tests: the shared server (scripts/services.sh starts it; override with
GW_TEST_REDIS), used with a unique key prefix that is deleted afterwards, and private
throwaway servers on free ports for the outage tests (never the shared one)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid

import redis

from tests.ports import free_port

REDIS_URL = os.environ.get("GW_TEST_REDIS", "redis://127.0.0.1:6379/0")


def redis_available(url: str = REDIS_URL) -> bool:
    try:
        client = redis.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except (redis.RedisError, OSError):
        return False


def unique_prefix() -> str:
    return f"gwtest:{uuid.uuid4().hex[:10]}:"


def delete_prefix(prefix: str, url: str = REDIS_URL) -> None:
    client = redis.Redis.from_url(url, socket_timeout=2)
    try:
        keys = list(client.scan_iter(match=prefix + "*", count=500))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


def keys_with_ttl(prefix: str, url: str = REDIS_URL) -> dict[str, int]:
    """Every key under the prefix and its PTTL (-1: no expiry)."""
    client = redis.Redis.from_url(url, socket_timeout=2)
    try:
        return {k.decode(): client.pttl(k) for k in client.scan_iter(match=prefix + "*", count=500)}
    finally:
        client.close()


class PrivateRedis:
    """A redis-server of our own on a free loopback port, no persistence; stop() and start() again
    on the same port to simulate an outage."""

    def __init__(self) -> None:
        self.binary = shutil.which("redis-server")
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> PrivateRedis:
        assert self.binary is not None, "redis-server is not installed"
        self.process = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--protected-mode", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while not redis_available(self.url):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"private redis-server on port {self.port} did not start")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.process = None
