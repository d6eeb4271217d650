"""Which listen addresses count as loopback, and so get a server that answers its own ``Host`` only."""

from __future__ import annotations

import pytest

from memory_core.core.hosts import is_loopback, matches, own_hosts


@pytest.mark.parametrize("address", ["127.0.0.1", "127.0.0.2", "localhost", "LOCALHOST", "::1", "[::1]"])
def test_addresses_that_reach_this_machine_only_are_loopback(address: str):
    assert is_loopback(address)


@pytest.mark.parametrize("address", ["0.0.0.0", "::", "", "10.0.0.5", "worker", "localhost.rebound.example"])
def test_every_interface_and_other_hosts_are_not_loopback(address: str):
    assert not is_loopback(address)


def test_a_bound_port_admits_each_loopback_name_with_that_port_only():
    allowed = own_hosts("127.0.0.1", 9464)
    assert all(matches(host, allowed) for host in ("127.0.0.1:9464", "localhost:9464", "[::1]:9464"))
    assert not any(matches(host, allowed) for host in ("127.0.0.1:9465", "127.0.0.1", "rebound.example:9464"))
