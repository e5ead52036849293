"""Free local TCP ports for the components a test or benchmark starts (the live stack, receivers)."""

from __future__ import annotations

import random
import socket


def free_ports(names: list[str]) -> dict[str, int]:
    """Free ports below the kernel's ephemeral range (32768+ on Linux), so that no outgoing
    connection of an already started component takes one before its owner binds it."""
    rng = random.Random()
    ports: dict[str, int] = {}
    while len(ports) < len(names):
        port = rng.randrange(20000, 32000)
        if port in ports.values():
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        ports[names[len(ports)]] = port
    return ports
