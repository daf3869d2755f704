"""runner.store: a store that does not answer at all is tried once per hold, not once per call (each try spends the
client's retries: 2-6 s), unless its port answers meanwhile; a store that answers, even with an error, is tried
every time. Loopback only: a port nothing listens on, and a tiny HTTP server that refuses every request, stopped by
the test."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytest.importorskip("boto3")

from runner import store as store_module  # noqa: E402
from runner.store import S3Store, StoreUnavailable  # noqa: E402


@pytest.fixture(autouse=True)
def credentials(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setattr(store_module, "_no_answer_until", {})   # no hold left by another test
    monkeypatch.setattr(store_module, "_probed_at", {})


def counted(store: S3Store) -> list:
    """The HTTP requests the store's client sends (its retries each count)."""
    sent: list = []
    store._client().meta.events.register("before-send.s3", lambda request, **_: sent.append(request.url))
    return sent


def test_a_store_that_does_not_answer_is_not_tried_again_until_the_hold_ends(monkeypatch):
    with socket.socket() as probe:   # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    store = S3Store.from_url("s3://ckpt/hold")
    sent = counted(store)
    with pytest.raises(StoreUnavailable, match=f"checkpoints failed: no answer from http://127.0.0.1:{port}$"):
        store.steps()
    tried = len(sent)
    assert tried > 1   # the client's retries
    with pytest.raises(StoreUnavailable,
                       match=r"reading a record failed: no answer from .* found none; asked again once its port answers"):
        store.get_json("job.json")
    assert len(sent) == tried   # not tried: the hold
    other = S3Store.from_url("s3://ckpt/another-prefix")   # the hold is the endpoint's, whatever the prefix
    other_sent = counted(other)
    with pytest.raises(StoreUnavailable, match="found none"):
        other.steps()
    assert other_sent == []
    monkeypatch.setattr(store_module, "_no_answer_until", {})   # the hold over: tried again
    with pytest.raises(StoreUnavailable, match="no answer from"):
        store.steps()
    assert len(sent) == 2 * tried


class Refuse(BaseHTTPRequestHandler):
    def do_GET(self):   # noqa: N802 - http.server's name
        body = b"<Error><Code>AccessDenied</Code><Message>no</Message></Error>"
        self.send_response(403)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def refusing_server(port: int = 0):
    """A loopback HTTP server that answers every request with S3's AccessDenied; its port."""
    server = ThreadingHTTPServer(("127.0.0.1", port), Refuse)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_a_store_back_within_the_hold_is_asked_once_its_port_answers(monkeypatch):
    monkeypatch.setattr(store_module, "PROBE_EVERY_S", 0.2)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    store = S3Store.from_url("s3://ckpt/back")
    sent = counted(store)
    with pytest.raises(StoreUnavailable, match="no answer from"):
        store.steps()
    tried = len(sent)
    with pytest.raises(StoreUnavailable, match="found none"):   # still dead, and no knock yet (found dead just now)
        store.steps()
    assert len(sent) == tried
    with refusing_server(port):   # the store is back on its port, within the 10 s hold
        with pytest.raises(StoreUnavailable, match="found none"):   # a knock at most every PROBE_EVERY_S
            store.steps()
        assert len(sent) == tried
        time.sleep(0.25)
        with pytest.raises(StoreUnavailable, match="AccessDenied"):   # knocked, answered: asked, and it answered
            store.steps()
        assert len(sent) == tried + 1 and store_module._no_answer_until == {}


def test_a_store_that_answers_with_an_error_is_tried_every_time(monkeypatch):
    with refusing_server() as port:
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
        store = S3Store.from_url("s3://ckpt/refused")
        sent = counted(store)
        for _ in range(2):
            with pytest.raises(StoreUnavailable, match="AccessDenied"):
                store.steps()
        assert len(sent) == 2 and store_module._no_answer_until == {}
