"""The console's pages: Flask routes over a `ClusterView`, rendered with Jinja2 templates.
Live parts of a page (the lag table and chart) are fragments that htmx reloads."""

from __future__ import annotations

import datetime as dt
import json
from urllib.parse import urlsplit
from typing import Any

from flask import Flask, abort, redirect, render_template, request, url_for
from werkzeug.exceptions import HTTPException
from werkzeug.wrappers import Response

from rivulet.cli.common import CliError, describe_failure
from rivulet.cli.console.backend import (
    ACL_OPERATIONS,
    ACL_PATTERN_TYPES,
    ACL_PERMISSIONS,
    ACL_RESOURCE_TYPES,
    RESET_STRATEGIES,
    ClusterView,
    acl_binding,
    show_acl,
)
from rivulet.cli.console.registry import RegistryView
from rivulet.cli.console.render import REGISTRY_VIEW, VIEWS, lag_chart, show_bytes, show_duration
from rivulet.client.errors import KafkaException
from rivulet.protocol.errors import ApiError
from rivulet.registry.client import RegistryError
from rivulet.registry.security import subject_topic
from rivulet.security.acls import AclBinding

# What a page reports as a message instead of a failure.
EXPECTED = (ApiError, CliError, ValueError)
PAGE_SIZE = 50


def _when(ms: int) -> str:
    if ms < 0:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def _int(name: str) -> int | None:
    raw = request.values.get(name, "").strip()
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError:
        abort(400, f"{name} must be a whole number")


def _registry_pages(app: Flask, registry: RegistryView) -> None:
    @app.get("/schemas")
    def subjects() -> str:
        try:
            return render_template("subjects.html", subjects=registry.subjects(),
                                   compatibility=registry.compatibility())
        except RegistryError as e:
            return render_template("subjects.html", subjects=[], compatibility="", error=str(e))

    @app.get("/schemas/<path:subject>")
    def subject(subject: str) -> str:
        try:
            detail = registry.subject(subject, _int("version"))
        except RegistryError as e:
            if e.not_found:
                abort(404, f"no subject {subject} (or no such version)")
            return render_template("subjects.html", subjects=[], compatibility="", error=str(e))
        schema = str(detail.shown.get("schema", ""))
        try:
            schema = json.dumps(json.loads(schema), indent=2)
        except ValueError:
            pass  # Protobuf's text
        return render_template("subject.html", detail=detail, schema=schema,
                               topic=subject_topic(subject))


def create_app(view: ClusterView, bootstrap: str, registry: RegistryView | None = None) -> Flask:
    """``registry``: the schema registry whose subjects the console shows and through which
    its message browser decodes values (the ``registry`` view)."""
    app = Flask(__name__)
    views = VIEWS + (REGISTRY_VIEW,) if registry is not None else VIEWS

    def show(data: bytes | None, chosen: str) -> str:
        if chosen == REGISTRY_VIEW and registry is not None:
            return registry.decode(data)
        return show_bytes(data, chosen)
    app.jinja_env.globals.update(bootstrap=bootstrap, show_bytes=show, show_time=_when, show_duration=show_duration,
                                 views=views,
                                 registry_url=registry.url if registry is not None else None)

    @app.before_request
    def same_origin_only() -> None:
        # The console has no login: a page of another site must not make the browser post to it
        # (delete a topic, reset offsets). Browsers name the page a form came from in Origin.
        if request.method == "POST":
            origin = request.headers.get("Origin")
            if origin is not None and urlsplit(origin).netloc != request.host:
                abort(403, "a form from another site is refused")

    @app.get("/")
    def cluster() -> str:
        cluster_id, brokers = view.cluster()
        topics = view.topics()
        return render_template("cluster.html", cluster_id=cluster_id, brokers=brokers,
                               topic_count=len(topics), partition_count=sum(len(t.partitions) for t in topics),
                               group_count=len(view.groups()))

    @app.get("/topics")
    def topics() -> str:
        return render_template("topics.html", topics=view.topics(), error=request.args.get("error"),
                               notice=request.args.get("notice"))

    @app.post("/topics")
    def create_topic() -> Response:
        name = request.form.get("name", "").strip()
        try:
            if not name:
                raise ValueError("give the topic a name")
            view.create_topic(name, _int("partitions") or -1, _int("replication_factor") or -1)
        except EXPECTED as e:
            return redirect(url_for("topics", error=str(e)))
        return redirect(url_for("topics", notice=f"Created topic {name}."))

    @app.post("/topics/<name>/delete")
    def delete_topic(name: str) -> Response:
        try:
            view.delete_topic(name)
        except EXPECTED as e:
            return redirect(url_for("topics", error=str(e)))
        return redirect(url_for("topics", notice=f"Deleted topic {name}."))

    @app.get("/topics/<name>")
    def topic(name: str) -> str:
        (t,) = view.topics(with_configs=True, names=[name])
        iceberg = view.table_status(t) if t.configs.get("iceberg.mode", "none") != "none" else None
        return render_template("topic.html", topic=t, iceberg=iceberg, error=request.args.get("error"),
                               notice=request.args.get("notice"))

    @app.post("/topics/<name>/configs")
    def alter_configs(name: str) -> Response:
        key = request.form.get("name", "").strip()
        try:
            if not key:
                raise ValueError("name the config")
            if request.form.get("action") == "delete":
                view.alter_topic_configs(name, {}, [key])
                done = f"{key} is back to its default."
            else:
                view.alter_topic_configs(name, {key: request.form.get("value", "").strip()}, [])
                done = f"Set {key}."
        except EXPECTED as e:
            return redirect(url_for("topic", name=name, error=str(e)))
        return redirect(url_for("topic", name=name, notice=done))

    def browse(name: str) -> dict[str, Any]:  # Any: the page template's values, each its own type
        """The message browser's state from the query: a live tail shows the latest records."""
        partition = _int("partition") or 0
        tail = request.args.get("tail") == "1"
        offset = None if tail else _int("offset")
        when = "" if tail else request.args.get("timestamp", "").strip()
        chosen = request.args.get("view", "text")
        error = None
        try:
            timestamp = None
            if when:
                t = dt.datetime.fromisoformat(when.replace("Z", "+00:00"))
                if t.tzinfo is None:
                    t = t.replace(tzinfo=dt.timezone.utc)
                timestamp = int(t.timestamp() * 1000)
            limit = min(max(_int("limit") or PAGE_SIZE, 1), 500)
            records = view.records(name, partition, offset, timestamp, limit)
        except EXPECTED as e:
            records, error = [], str(e)
        (t,) = view.topics(names=[name])
        return dict(topic=t, partition=partition, offset=offset, when=when, tail=tail, records=records,
                    view=chosen if chosen in views else "text", error=error)

    @app.get("/topics/<name>/messages")
    def messages(name: str) -> str:
        return render_template("messages.html", **browse(name))

    @app.get("/topics/<name>/messages/table")
    def messages_table(name: str) -> str:
        return render_template("messages_table.html", **browse(name))

    @app.get("/acls")
    def acls() -> str:
        return render_template("acls.html", bindings=view.acls(), resource_types=ACL_RESOURCE_TYPES,
                               pattern_types=ACL_PATTERN_TYPES, operations=ACL_OPERATIONS,
                               permissions=ACL_PERMISSIONS, error=request.args.get("error"),
                               notice=request.args.get("notice"))

    def posted_acl() -> AclBinding:
        f = request.form
        return acl_binding(f.get("resource_type", ""), f.get("name", ""), f.get("pattern_type", ""),
                           f.get("principal", ""), f.get("host", ""), f.get("operation", ""),
                           f.get("permission", ""))

    @app.post("/acls")
    def create_acl() -> Response:
        try:
            binding = posted_acl()
            view.create_acl(binding)
        except EXPECTED as e:
            return redirect(url_for("acls", error=str(e)))
        return redirect(url_for("acls", notice=f"Created ACL: {show_acl(binding)}."))

    @app.post("/acls/delete")
    def delete_acl() -> Response:
        try:
            binding = posted_acl()
            deleted = view.delete_acl(binding)
        except EXPECTED as e:
            return redirect(url_for("acls", error=str(e)))
        done = "Deleted ACL" if deleted else "No such ACL (already deleted?)"
        return redirect(url_for("acls", notice=f"{done}: {show_acl(binding)}."))

    if registry is not None:
        _registry_pages(app, registry)

    @app.get("/groups")
    def groups() -> str:
        return render_template("groups.html", groups=view.group_summaries())

    @app.get("/groups/<group_id>")
    def group(group_id: str) -> str:
        info, rows = view.group(group_id)
        return render_template("group.html", info=info, rows=rows, strategies=RESET_STRATEGIES,
                               chart=lag_chart(list(view.lag_history[group_id].samples)),
                               topics=sorted({r.topic for r in rows}), plan=None, applied=False, error=None,
                               form={})

    @app.get("/groups/<group_id>/lag")
    def group_lag(group_id: str) -> str:
        info, rows = view.group(group_id)
        return render_template("group_lag.html", info=info, rows=rows,
                               chart=lag_chart(list(view.lag_history[group_id].samples)))

    @app.post("/groups/<group_id>/reset")
    def reset(group_id: str) -> str:
        form = {k: request.form.get(k, "") for k in ("topic", "strategy", "value")}
        apply = request.form.get("action") == "apply"
        plan, error = None, None
        try:
            run = view.apply_reset if apply else view.reset_plan
            plan = run(group_id, form["topic"] or None, form["strategy"], form["value"])
        except EXPECTED as e:
            error = str(e)
        info, rows = view.group(group_id)
        return render_template("group.html", info=info, rows=rows, strategies=RESET_STRATEGIES,
                               chart=lag_chart(list(view.lag_history[group_id].samples)),
                               topics=sorted({r.topic for r in rows}), plan=plan, applied=apply and plan is not None,
                               error=error, form=form)

    @app.errorhandler(Exception)
    def failed(e: Exception) -> tuple[str, int]:
        if isinstance(e, HTTPException):
            return render_template("base.html", error=e.description), e.code or 500
        if isinstance(e, (OSError, KafkaException, ApiError)):  # the cluster, not the page
            return render_template("base.html", error=describe_failure(e, bootstrap)), 502
        app.logger.exception("page failed")
        return render_template("base.html", error=describe_failure(e, bootstrap)), 500

    return app
