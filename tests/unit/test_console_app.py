"""The console's pages when the cluster is away: a page saying so, not a traceback."""

from __future__ import annotations

import pytest

from rivulet.cli.console.app import create_app
from rivulet.cli.console.backend import ClusterView
from rivulet.testing import free_port

pytestmark = pytest.mark.fast


def test_unreachable_cluster_is_a_page() -> None:
    bootstrap = f"127.0.0.1:{free_port()}"  # nothing listens there
    view = ClusterView({"bootstrap.servers": bootstrap, "request.timeout.ms": 2000})
    try:
        client = create_app(view, bootstrap).test_client()
        r = client.get("/topics")
        assert r.status_code == 502
        assert f"cannot reach {bootstrap}" in r.text
        assert client.get("/no-such-page").status_code == 404
    finally:
        view.close()
