"""A small admin API client for gwctl's commands that talk to a running gateway."""

from __future__ import annotations

from typing import Any

import httpx

from gateway.config import ClientSettings


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
