"""The workers' metrics endpoint has no auth: on loopback it answers its own address only, never a rebound name.

A web page that rebinds its DNS name to 127.0.0.1 makes the browser send that name in ``Host``; the endpoint
refuses it (421) with no metrics in the body, so the page cannot read namespace names and counts. On any other
address (a compose network, scraped by service name) it answers every ``Host``, as Prometheus needs.
"""

from __future__ import annotations

import httpx
import pytest

from memory_core.core import metrics

SERIES = "# HELP memory_core_tasks_total"


def _get(port: int, host: str) -> httpx.Response:
    return httpx.get(f"http://127.0.0.1:{port}/metrics", headers={"Host": host}, timeout=10)


def test_a_loopback_endpoint_answers_its_own_address_under_each_loopback_name():
    port = metrics.serve("127.0.0.1", 0)
    assert port > 0
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LocalHost:{port}"):
        answer = _get(port, host)
        assert answer.status_code == 200, (host, answer.text)
        assert SERIES in answer.text


@pytest.mark.parametrize(
    "foreign",
    [
        "rebound.example:{port}",  # a page's own name, rebound to 127.0.0.1
        "rebound.example",
        "127.0.0.1:{other}",  # another port: another server's origin
        "127.0.0.1",  # port 80 by default, not this endpoint's
        "127.0.0.1:{port}.rebound.example",
        "",
    ],
)
def test_a_loopback_endpoint_refuses_any_other_host_with_421_and_no_metrics(foreign: str):
    port = metrics.serve("127.0.0.1", 0)
    host = foreign.format(port=port, other=port + 1)
    answer = _get(port, host)
    assert answer.status_code == 421, (host, answer.text)
    assert "memory_core" not in answer.text
    assert "is not this endpoint's" in answer.text


def test_an_endpoint_on_every_interface_answers_the_name_prometheus_scrapes_it_by():
    # As in docker-compose.yml: MEMORY_METRICS__ADDRESS=0.0.0.0, scraped as worker:9464 on the compose network.
    port = metrics.serve("0.0.0.0", 0)
    answer = _get(port, f"worker:{port}")
    assert answer.status_code == 200
    assert SERIES in answer.text
