"""The console's pages without a cluster: a page saying it is away, not a traceback; forms
posted from another site refused."""

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


def test_forms_from_another_site_are_refused() -> None:
    bootstrap = f"127.0.0.1:{free_port()}"
    view = ClusterView({"bootstrap.servers": bootstrap, "request.timeout.ms": 2000})
    try:
        client = create_app(view, bootstrap).test_client()
        r = client.post("/topics/orders/delete", headers={"Origin": "http://evil.example"})
        assert r.status_code == 403 and "another site" in r.text
        for path in ("/acls", "/acls/delete"):
            r = client.post(path, data={"resource_type": "TOPIC", "name": "t", "pattern_type": "LITERAL",
                                        "principal": "User:eve", "operation": "ALL", "permission": "ALLOW"},
                            headers={"Origin": "http://evil.example"})
            assert r.status_code == 403 and "another site" in r.text
        # Its own pages' forms (same origin, or no Origin header) reach the cluster, here away.
        r = client.post("/topics/orders/delete", headers={"Origin": "http://localhost"})
        assert r.status_code == 502 and f"cannot reach {bootstrap}" in r.text
    finally:
        view.close()


def test_port_in_use_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    from rivulet.cli.main import main
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["console", "-b", f"127.0.0.1:{free_port()}", "--port", str(port)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"rivulet console: cannot serve on 127.0.0.1:{port}: Address already in use"]
