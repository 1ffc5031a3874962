import socket

from providers.engines.ports import base_url, free_ports, port_in_use


def test_free_ports_are_distinct_and_free() -> None:
    ports = free_ports("127.0.0.1", 4)
    assert len(set(ports)) == 4
    assert not any(port_in_use("127.0.0.1", p) for p in ports)


def test_a_listening_port_is_in_use() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert port_in_use("127.0.0.1", s.getsockname()[1])


def test_base_url_reaches_wildcard_hosts_through_loopback() -> None:
    assert base_url("127.0.0.1", 8600) == "http://127.0.0.1:8600/v1"
    assert base_url("0.0.0.0", 8600) == "http://127.0.0.1:8600/v1"
    assert base_url("::", 8600) == "http://[::1]:8600/v1"
