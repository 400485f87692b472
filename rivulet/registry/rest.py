"""Confluent Schema Registry's REST API over ``SchemaRegistry`` (Flask, as the web console):
its paths and query parameters, its content types and its error bodies."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

from flask import Flask, Response, g, request
from werkzeug.exceptions import HTTPException

from rivulet.registry import errors as E
from rivulet.registry.election import WriterElection
from rivulet.registry.errors import RestError
from rivulet.registry.security import UNAUTHORIZED, Caller, RegistrySecurity, required
from rivulet.registry.service import SchemaRegistry

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
# The request bodies Confluent's registry takes.
ACCEPTED_BODIES = ("application/vnd.schemaregistry.v1+json", "application/vnd.schemaregistry+json",
                   "application/json", "application/octet-stream")
MAX_BODY_BYTES = 16 << 20
FORWARDED = "X-Rivulet-Forwarded"
# The WSGI environ key where a TLS listener puts the subject of the client's certificate.
PEER_DN = "rivulet.peer_dn"
FORWARD_TIMEOUT_S = 60.0


def _flag(name: str) -> bool:
    return request.args.get(name, "false").lower() == "true"


def _reply(doc: object, status: int = 200) -> Response:
    accept = request.headers.get("Accept", "")
    # A client that asks for plain JSON only gets it; every other gets Confluent's own type.
    ctype = "application/json" if accept.strip() == "application/json" else CONTENT_TYPE
    return Response(json.dumps(doc), status=status, content_type=ctype)


def _body() -> object:
    ctype = (request.mimetype or "").lower()
    if ctype and ctype not in ACCEPTED_BODIES:
        raise RestError(415, 415, "HTTP 415 Unsupported Media Type")
    raw = request.get_data(cache=False)
    try:
        return json.loads(raw)
    except ValueError as e:
        raise RestError(400, 400, f"Unexpected character in the request body: {e}") from None


Route = Callable[[str | tuple[str, ...], list[str]], Callable[[Callable[..., object]], Callable[..., Response]]]
CHANGES = ("POST", "PUT", "DELETE")
# POSTs that only read: a look-up and the compatibility checks, answered where they arrive.
READING_POSTS = {("/subjects/<subject>", ("POST",)),
                 ("/compatibility/subjects/<subject>/versions/<version>", ("POST",)),
                 ("/compatibility/subjects/<subject>/versions", ("POST",))}


def _forward(election: WriterElection, tls: ssl.SSLContext | None) -> Response:
    """Hand a change to the writer and its answer back, as Confluent's followers do."""
    writer = election.writer_url()
    if writer is None or request.headers.get(FORWARDED):
        raise E.error(E.UNKNOWN_LEADER, "Request failed since leader is unknown")
    # As sent: the subject's encoded slashes stay encoded.
    url = writer + (request.environ.get("REQUEST_URI") or request.full_path.rstrip("?"))
    headers = {k: v for k, v in request.headers.items() if k.lower() in ("content-type", "accept", "authorization")}
    headers[FORWARDED] = "true"
    req = urllib.request.Request(url, data=request.get_data() if request.method != "DELETE" else None,
                                 headers=headers, method=request.method)
    try:
        with urllib.request.urlopen(req, timeout=FORWARD_TIMEOUT_S, context=tls) as answer:
            return Response(answer.read(), status=answer.status, content_type=answer.headers.get("Content-Type"))
    except urllib.error.HTTPError as e:
        return Response(e.read(), status=e.code, content_type=e.headers.get("Content-Type"))
    except OSError as e:
        raise E.error(E.REQUEST_FORWARDING_FAILED,
                      f"Error while forwarding the request to the leader {writer}: {e}") from None


# A subject's encoded slash (%2F) stands for this character while the path is routed, so that
# "a/versions" is one subject and not a subject and a path segment (Confluent's JAX-RS routes
# match an encoded slash inside a path parameter the same way).
SLASH = "\ue000"


class _EncodedSlashes:
    """WSGI middleware: the path as sent (waitress's REQUEST_URI), decoded but for its %2F."""

    def __init__(self, app: WSGIApplication) -> None:
        self.app = app

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        raw = environ.get("REQUEST_URI", "").split("?", 1)[0]
        if "%2f" in raw.lower():
            path = urllib.parse.unquote(raw.replace("%2F", SLASH).replace("%2f", SLASH))
            environ["PATH_INFO"] = path.encode().decode("latin-1")  # WSGI's str of bytes
        return self.app(environ, start_response)


def _subject(kw: dict[str, str]) -> dict[str, str]:
    if "subject" in kw:
        kw["subject"] = kw["subject"].replace(SLASH, "/")
    return kw


def create_wsgi(registry: SchemaRegistry, election: WriterElection, security: RegistrySecurity | None = None,
                forward_tls: ssl.SSLContext | None = None) -> WSGIApplication:
    """The registry's WSGI application. ``forward_tls``: how to reach the writer over https."""
    return _EncodedSlashes(create_app(registry, election, security, forward_tls))


# Lists whose entries name a subject: each is answered with those the caller may read.
_LISTS = {"/subjects", "/schemas", "/schemas/ids/<int:schema_id>/versions", "/schemas/ids/<int:schema_id>/subjects"}


def _guard(app: Flask, registry: SchemaRegistry, security: RegistrySecurity) -> None:
    """Authenticate every request, and authorize it on its subject (or the registry)."""
    @app.before_request
    def guard() -> None:
        caller = security.authenticator.caller(request.headers.get("Authorization"), request.environ.get(PEER_DN),
                                               request.remote_addr or "")
        g.caller = caller
        authorizer = security.authorizer
        if authorizer is None or request.url_rule is None:
            return
        rule, args = request.url_rule.rule, request.view_args or {}
        need = required(rule, request.method)
        subject = str(args["subject"]).replace(SLASH, "/") if "subject" in args else None
        if need is not None:
            op, on_subject = need
            authorizer.check(caller, op, subject if on_subject else None)
        elif rule.startswith("/schemas/ids/<int:schema_id>") and rule not in _LISTS:
            authorizer.check_any(caller, registry.id_subjects(args["schema_id"], True), f"Schema: {args['schema_id']}")


def _readable(security: RegistrySecurity | None, rule: str, doc: object) -> object:
    """A list answer with only the subjects the caller may read."""
    if security is None or security.authorizer is None or rule not in _LISTS or not isinstance(doc, list):
        return doc
    caller: Caller = g.caller
    names = [str(d["subject"]) if isinstance(d, dict) else str(d) for d in doc]
    keep = security.authorizer.readable(caller, names)
    return [d for d, name in zip(doc, names, strict=True) if name in keep]


def create_app(registry: SchemaRegistry, election: WriterElection, security: RegistrySecurity | None = None,
               forward_tls: ssl.SSLContext | None = None) -> Flask:
    app = Flask("rivulet.registry")
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES
    if security is not None:
        _guard(app, registry, security)

    def route(rules: str | tuple[str, ...], methods: list[str]
              ) -> Callable[[Callable[..., object]], Callable[..., Response]]:
        """A view of one rule or several answering what ``fn`` returns as Confluent's JSON; a
        change reaches ``fn`` only on the writer (POST /subjects/{s} and the compatibility
        checks only read)."""
        rules = (rules,) if isinstance(rules, str) else rules
        changes = any(m in CHANGES for m in methods) and \
            not any((rule, tuple(methods)) in READING_POSTS for rule in rules)

        def wrap(fn: Callable[..., object]) -> Callable[..., Response]:
            def view(**kw: str) -> Response:
                if changes and not election.is_writer():
                    return _forward(election, forward_tls)
                return _reply(_readable(security, request.url_rule.rule if request.url_rule else "",
                                        fn(**_subject(kw))))
            view.__name__ = f"{fn.__name__}_{'_'.join(methods)}"
            for rule in rules:
                app.add_url_rule(rule, view.__name__, view, methods=methods, strict_slashes=False)
            return view
        return wrap

    _error_handlers(app)
    _schema_routes(app, route, registry)
    _subject_routes(app, route, registry)
    _config_routes(route, registry)
    return app


def _error_handlers(app: Flask) -> None:
    @app.errorhandler(RestError)
    def rest_error(e: RestError) -> Response:
        answer = _reply(e.body(), e.status)
        if e.error_code == UNAUTHORIZED:
            answer.headers["WWW-Authenticate"] = 'Basic realm="SchemaRegistry"'
        return answer

    @app.errorhandler(HTTPException)
    def http_error(e: HTTPException) -> Response:
        status = e.code or 500
        return _reply({"error_code": status, "message": f"HTTP {status} {e.name}"}, status)

    @app.errorhandler(Exception)
    def failure(e: Exception) -> Response:
        app.logger.exception("schema registry request failed")
        return _reply({"error_code": 500, "message": str(e) or type(e).__name__}, 500)



def _schema_routes(app: Flask, route: Route, r: SchemaRegistry) -> None:
    @route("/", ["GET"])
    def root() -> object:
        return {}

    # -- schemas by id
    @route("/schemas/types", ["GET"])
    def types() -> object:
        return r.types()

    @route("/schemas", ["GET"])
    def schemas() -> object:
        return r.schemas(_flag("deleted"))

    @route("/schemas/ids/<int:schema_id>", ["GET"])
    def by_id(schema_id: int) -> object:
        return r.schema_by_id(schema_id, request.args.get("subject"), request.args.get("format"))

    @app.route("/schemas/ids/<int:schema_id>/schema", methods=["GET"])
    def by_id_raw(schema_id: int) -> Response:
        return Response(str(r.schema_by_id(schema_id, request.args.get("subject"))["schema"]),
                        content_type=CONTENT_TYPE)

    @route("/schemas/ids/<int:schema_id>/versions", ["GET"])
    def id_versions(schema_id: int) -> object:
        return r.id_versions(schema_id, _flag("deleted"))

    @route("/schemas/ids/<int:schema_id>/subjects", ["GET"])
    def id_subjects(schema_id: int) -> object:
        return r.id_subjects(schema_id, _flag("deleted"))



def _subject_routes(app: Flask, route: Route, r: SchemaRegistry) -> None:
    @route("/subjects", ["GET"])
    def subjects() -> object:
        return r.subjects(_flag("deleted"), request.args.get("subjectPrefix", ""))

    @route("/subjects/<subject>/versions", ["GET"])
    def versions(subject: str) -> object:
        return r.versions(subject, _flag("deleted"))

    @route("/subjects/<subject>/versions", ["POST"])
    def register(subject: str) -> object:
        return r.register(subject, _body(), _flag("normalize"))

    @route("/subjects/<subject>/versions/<version>", ["GET"])
    def get_version(subject: str, version: str) -> object:
        return r.get_version(subject, version, _flag("deleted"), request.args.get("format"))

    @app.route("/subjects/<subject>/versions/<version>/schema", methods=["GET"])
    def get_version_raw(subject: str, version: str) -> Response:
        return Response(r.get_version_schema(subject.replace(SLASH, "/"), version, _flag("deleted")),
                        content_type=CONTENT_TYPE)

    @route("/subjects/<subject>/versions/<version>/referencedby", ["GET"])
    def referenced_by(subject: str, version: str) -> object:
        return r.referenced_by(subject, version)

    @route("/subjects/<subject>/versions/<version>", ["DELETE"])
    def delete_version(subject: str, version: str) -> object:
        return r.delete_version(subject, version, _flag("permanent"))

    @route("/subjects/<subject>", ["POST"])
    def lookup(subject: str) -> object:
        return r.lookup(subject, _body(), _flag("deleted"), _flag("normalize"))

    @route("/subjects/<subject>", ["DELETE"])
    def delete_subject(subject: str) -> object:
        return r.delete_subject(subject, _flag("permanent"))

    # -- compatibility
    @route("/compatibility/subjects/<subject>/versions/<version>", ["POST"])
    def compatible_with(subject: str, version: str) -> object:
        return r.check_compatibility(subject, version, _body(), _flag("verbose"))

    @route("/compatibility/subjects/<subject>/versions", ["POST"])
    def compatible_with_all(subject: str) -> object:
        return r.check_compatibility(subject, None, _body(), _flag("verbose"))



def _config_routes(route: Route, r: SchemaRegistry) -> None:
    # The registry's own setting and a subject's are one view each: no subject means the registry.
    config = ("/config", "/config/<subject>")
    mode = ("/mode", "/mode/<subject>")

    @route(config, ["GET"])
    def get_config(subject: str | None = None) -> object:
        return r.get_config(subject, _flag("defaultToGlobal"))

    @route(config, ["PUT"])
    def set_config(subject: str | None = None) -> object:
        return r.set_config(subject, _body())

    @route(config, ["DELETE"])
    def delete_config(subject: str | None = None) -> object:
        return r.delete_config(subject)

    @route(mode, ["GET"])
    def get_mode(subject: str | None = None) -> object:
        return r.get_mode(subject, _flag("defaultToGlobal"))

    @route(mode, ["PUT"])
    def set_mode(subject: str | None = None) -> object:
        return r.set_mode(subject, _body(), _flag("force"))

    @route("/mode/<subject>", ["DELETE"])
    def delete_mode(subject: str) -> object:
        return r.delete_mode(subject)
