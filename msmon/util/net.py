"""Local network helpers: loopback addresses and ports."""

from __future__ import annotations

import ipaddress
import socket


def probe_host(host: str) -> str:
    """The address to query for a server bound to ``host`` (a wildcard is queried on loopback)."""
    return "127.0.0.1" if host in ("0.0.0.0", "", "::") else host  # noqa: S104 - a comparison, no bind


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine's loopback interface."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def free_port(host: str) -> int:
    """A port nothing listens on at ``host`` (the kernel's pick)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_in_use(host: str, port: int) -> bool:
    """Whether binding ``host:port`` fails (something listens there)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False
