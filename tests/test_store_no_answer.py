"""runner.store: a store that does not answer at all is tried once per hold, not once per call (each try spends the
client's retries: 2-6 s); a store that answers, even with an error, is tried every time. Loopback only: a port
nothing listens on, and a tiny HTTP server that refuses every request, stopped by the test."""

from __future__ import annotations

import socket
import threading
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
    with pytest.raises(StoreUnavailable, match=r"reading a record failed: no answer from .* found none; tried again"):
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


def test_a_store_that_answers_with_an_error_is_tried_every_time(monkeypatch):
    server = ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{server.server_address[1]}")
        store = S3Store.from_url("s3://ckpt/refused")
        sent = counted(store)
        for _ in range(2):
            with pytest.raises(StoreUnavailable, match="AccessDenied"):
                store.steps()
        assert len(sent) == 2 and store_module._no_answer_until == {}
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
