"""A small admin API client for gwctl's commands that talk to a running gateway."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from pydantic import SecretStr

from gateway.config import ClientSettings
from kernel.errors import ConfigError


class GatewayUnreachable(Exception):
    """One line for the user: the gateway could not be reached or refused the call."""


class AdminClient:
    def __init__(self, settings: ClientSettings, *, transport: httpx.BaseTransport | None = None) -> None:
        headers = {}
        if settings.admin_key is not None:
            headers["authorization"] = f"Bearer {settings.admin_key.get_secret_value()}"
        self._url = settings.url.rstrip("/")
        self._http = httpx.Client(base_url=self._url, headers=headers, timeout=settings.timeout, transport=transport)

    def get(self, path: str) -> Any:
        try:
            response = self._http.get(path)
        except httpx.HTTPError as exc:
            raise GatewayUnreachable(f"cannot reach the gateway at {self._url}: {exc}") from None
        if response.status_code >= 400:
            try:
                message = response.json()["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = response.text[:200]
            raise GatewayUnreachable(f"{path}: {response.status_code} {message}")
        return response.json()

    def close(self) -> None:
        self._http.close()


def add_admin_key_options(parser: Any) -> None:
    parser.add_argument(
        "--admin-key-file", help="read the admin key from this file (default: $GW_ADMIN_KEY_FILE, then $GW_ADMIN_KEY)"
    )
    parser.add_argument(
        "--admin-key",
        help="the admin key itself (other local users can read it in `ps`: prefer the file or $GW_ADMIN_KEY)",
    )


def client_settings(args: Any) -> ClientSettings:
    """ClientSettings with the command line's --url, --admin-key-file or --admin-key over the
    environment's; a key file, given either way, wins over a key given either way."""
    overrides: dict[str, Any] = {"url": args.url} if getattr(args, "url", None) else {}
    if getattr(args, "admin_key_file", None):
        overrides["admin_key"] = read_key_file(args.admin_key_file)
    elif getattr(args, "admin_key", None):
        overrides["admin_key"] = args.admin_key
    settings = ClientSettings(**overrides)
    if "admin_key" not in overrides and settings.admin_key_file:
        settings = settings.model_copy(update={"admin_key": SecretStr(read_key_file(settings.admin_key_file))})
    return settings


def read_key_file(path: str) -> str:
    try:
        key = Path(path).expanduser().read_text().strip()
    except OSError as exc:
        raise ConfigError(f"cannot read the admin key file {path}: {exc.strerror or exc}") from None
    if not key:
        raise ConfigError(f"the admin key file {path} is empty")
    return key
