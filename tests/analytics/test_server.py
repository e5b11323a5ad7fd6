"""The HTTP server: tokens, isolation, bad parameters, limits (large bodies refused so that every
client gets the 413, reading no more than bounded), pushes over server-sent events with ids,
resuming by Last-Event-ID, disconnect cleanup, slow clients, unused handles, and the Prometheus
metrics the server exposes."""

import http.client
import json
import queue
import socket
import threading
import time
import urllib.error
import urllib.request

from analytics.bodies import DISCARD_BYTES, DISCARD_SECONDS
from tests.helpers import scraped


def call(live, method, path, token="t-ann", body=None):
    request = urllib.request.Request(live.url + path, method=method,
                                     data=None if body is None else json.dumps(body).encode())
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


def subscribe(live, syms, token="t-ann"):
    return call(live, "POST", "/subscriptions", token,
                {"analytic": "cpu_by_server", "target": "servers", "params": {"syms": syms}})


class Stream:
    """Reads a server-sent-events stream in a thread; ``events`` gets each (event, data), and
    ``ids`` each event's id."""

    def __init__(self, live, client, token="t-ann", query="", headers=None):
        connection = http.client.HTTPConnection("127.0.0.1", live.port, timeout=60)
        connection.request("GET", f"/stream/{client}?token={token}{query}", headers=headers or {})
        self.socket = connection.sock  # kept: the connection lets go of it once the response is read
        self.response = connection.getresponse()
        if self.response.status != 200:
            raise urllib.error.HTTPError(self.response.url, self.response.status,
                                         self.response.read().decode(), self.response.headers, None)
        self.events, self.ids = queue.Queue(), []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        event = None
        try:
            for raw in self.response:
                line = raw.decode().rstrip("\n")
                if line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("id: "):
                    self.ids.append(line[4:])
                elif line.startswith("data: "):
                    self.events.put((event, json.loads(line[6:])))
        except Exception:
            pass  # closed by the test

    def next(self, seconds=60):
        return self.events.get(timeout=seconds)

    def close(self):
        """Hang up. A plain close waits for the reading thread, which waits for the server's
        next bytes (up to the socket's timeout); shutting the socket down wakes it at once."""
        self.socket.shutdown(socket.SHUT_RDWR)
        self.response.close()
        self.socket.close()


def metrics(live):
    """The server's Prometheus metrics, as a scrape reads them."""
    return scraped(f"{live.url}/metrics")


def wait_for(condition, seconds=30):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.1)


def test_tokens_isolation_and_bad_parameters(live):
    assert call(live, "GET", "/analytics", token=None)[0] == 401
    assert call(live, "GET", "/analytics", token="forged")[0] == 403
    status, handle = subscribe(live, ["s1"])
    assert status == 200 and handle["rows"] == [] and handle["keys"] == ["sym"]
    assert call(live, "GET", "/subscriptions", "t-bob") == (200, [])
    assert call(live, "DELETE", f"/subscriptions/{handle['client']}", "t-bob")[0] == 404
    assert call(live, "GET", f"/subscriptions/{handle['client']}/snapshot", "t-bob")[0] == 404
    status, error = subscribe(live, "s1'; DROP TABLE x")
    assert status == 400 and "parameter 'syms' must be a list of string" in error["error"]
    assert [s["client"] for s in call(live, "GET", "/subscriptions")[1]] == [handle["client"]]


def test_pushes_then_disconnect_releases_the_handle(live):
    live.feed([{"sym": "s1", "cpu": 10.0}, {"sym": "s2", "cpu": 20.0}])
    wait_for(lambda: live.manager.published("servers") == 1)  # the server's poller saw batch 1
    _, handle = subscribe(live, ["s1"])
    assert [(r["sym"], r["cpu"]) for r in handle["rows"]] == [("s1", 10.0)] and handle["batch_id"] == 1
    stream = Stream(live, handle["client"])
    live.feed([{"sym": "s1", "cpu": 11.0}, {"sym": "s2", "cpu": 21.0}])
    event, delta = stream.next()
    assert event == "delta" and delta["batch_id"] == 2 and stream.ids == ["2"]
    assert [(r["sym"], r["cpu"]) for r in delta["rows"]] == [("s1", 11.0)]

    held = metrics(live)
    assert {name: held[(name, ())] for name in (
        "lakestream_analytics_subscribes_total", "lakestream_analytics_handles",
        "lakestream_analytics_streams_open", "lakestream_analytics_subscriptions")} == {
        "lakestream_analytics_subscribes_total": 1, "lakestream_analytics_handles": 1,
        "lakestream_analytics_streams_open": 1, "lakestream_analytics_subscriptions": 1}
    assert held[("lakestream_analytics_deliveries_total", (("kind", "delta"),))] == 1
    assert held[("lakestream_analytics_published_batch", (("target", "servers"),))] == 2

    caught_up = call(live, "GET", f"/subscriptions/{handle['client']}/deltas?after=1")[1]["deltas"]
    assert [(d["batch_id"], d["rows"][0]["cpu"]) for d in caught_up] == [(2, 11.0)]  # resumable
    assert call(live, "GET", f"/subscriptions/{handle['client']}/deltas?after=x")[0] == 400

    stream.close()  # the client goes away; after the grace period its handle is released
    wait_for(lambda: call(live, "GET", "/subscriptions")[1] == [])
    assert live.manager.subscriptions("ann") == []
    status, error = call(live, "GET", f"/subscriptions/{handle['client']}/snapshot")
    assert status == 404 and error["error"].endswith(
        "was released: its stream ended and none reopened within 0.5 s (grace_seconds); "
        "subscribe again")
    released = metrics(live)
    assert released[("lakestream_analytics_released_total", (("why", "not_reconnected"),))] == 1
    assert released[("lakestream_analytics_handles", ())] == 0
    assert released[("lakestream_analytics_subscriptions", ())] == 0


def test_a_slow_client_is_dropped_with_the_reason_and_others_go_on(live):
    _, handle = subscribe(live, ["s1"])   # never reads its stream; its queue holds 2 deltas
    _, bobs = subscribe(live, ["s1"], token="t-bob")
    bob = Stream(live, bobs["client"], token="t-bob")
    for cpu in (1.0, 2.0, 3.0):
        live.feed([{"sym": "s1", "cpu": cpu}])
    wait_for(lambda: live.server.clients[handle["client"]].dropped is not None, seconds=60)
    assert call(live, "DELETE", f"/subscriptions/{handle['client']}")[0] == 200  # gone already
    status, error = call(live, "GET", f"/stream/{handle['client']}?token=t-ann")
    assert status == 410 and error["error"].startswith("slow client")
    released = metrics(live)  # let go once, though dropped and then deleted
    assert [(labels, n) for (name, labels), n in released.items()
            if name == "lakestream_analytics_released_total"] == [((("why", "dropped"),), 1)]
    assert live.manager.subscriptions("ann") == []
    assert [bob.next()[1]["rows"][0]["cpu"] for _ in range(3)] == [1.0, 2.0, 3.0]  # unaffected
    assert bob.ids == ["1", "2", "3"]
    bob.close()


def test_a_reconnect_gets_exactly_what_it_missed_or_a_snapshot(make_live):
    live = make_live(grace_seconds=60, queue_size=16)
    live.feed([{"sym": "s1", "cpu": 1.0}])
    wait_for(lambda: live.manager.published("servers") == 1)
    _, handle = subscribe(live, ["s1"])
    client = handle["client"]
    first = Stream(live, client, query="&last_event_id=1")  # as the page opens it
    live.feed([{"sym": "s1", "cpu": 2.0}])
    live.feed([{"sym": "s1", "cpu": 3.0}])
    assert [first.next()[1]["batch_id"] for _ in range(2)] == [2, 3]
    first.close()  # missed: batch 4
    live.feed([{"sym": "s1", "cpu": 4.0}])
    wait_for(lambda: live.manager.published("servers") == 4)

    again = Stream(live, client, headers={"Last-Event-ID": "2"})  # the header wins
    assert [again.next() for _ in range(2)] == [
        ("delta", {"batch_id": 3, "rows": [{"sym": "s1", "cpu": 3.0, "_change": "update",
                                            "_batch_id": 3}]}),
        ("delta", {"batch_id": 4, "rows": [{"sym": "s1", "cpu": 4.0, "_change": "update",
                                            "_batch_id": 4}]})]
    live.feed([{"sym": "s1", "cpu": 5.0}])
    assert again.next()[1]["batch_id"] == 5 and again.ids == ["3", "4", "5"]  # nothing twice
    again.close()

    for stale in ("0", "99"):  # before the subscription began / never reached: a fresh snapshot
        snap = Stream(live, client, query=f"&last_event_id={stale}")
        event, data = snap.next()
        assert event == "snapshot" and data["batch_id"] == 5 and snap.ids == ["5"]
        assert [(r["sym"], r["cpu"]) for r in data["rows"]] == [("s1", 5.0)]
        snap.close()
    status, error = call(live, "GET", f"/stream/{client}?token=t-ann&last_event_id=x")
    assert status == 400 and "Last-Event-ID" in error["error"]


def raw_post(live, body, chunked=False, token="t-ann"):
    """POST /subscriptions with ``body`` bytes, with a Content-Length or chunked."""
    connection = http.client.HTTPConnection("127.0.0.1", live.port, timeout=60)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    if chunked:
        pieces = (body[i:i + 8192] for i in range(0, len(body), 8192))
        connection.request("POST", "/subscriptions", pieces, headers, encode_chunked=True)
    else:
        connection.request("POST", "/subscriptions", body, headers)
    response = connection.getresponse()
    answer = response.status, json.loads(response.read())
    connection.close()
    return answer


def test_request_bodies_are_limited_and_errors_quote_little(make_live):
    live = make_live(max_body_bytes=4096)
    big = json.dumps({"analytic": "x" * 100_000, "target": "servers", "params": {}}).encode()
    for chunked in (False, True):
        status, error = raw_post(live, big, chunked=chunked)
        assert status == 413 and "the limit is 4096 bytes (max_body_bytes)" in error["error"]

    long_name = "<" + "y" * 3000 + ">"  # within the limit: the error quotes 80 characters of it
    status, error = raw_post(live, json.dumps({"analytic": long_name, "target": "servers",
                                               "params": {}}).encode())
    assert status == 400 and error["error"].startswith("no analytic '<yyy")
    assert "(3004 chars)" in error["error"] and len(error["error"]) < 300
    status, error = raw_post(live, json.dumps({"analytic": "cpu_by_server", "target": "servers",
                                               "params": {"syms": "z" * 3000}}).encode())
    assert status == 400 and len(error["error"]) < 300 and "must be a list of string" in error["error"]
    status, error = raw_post(live, b"[" * 3000)
    assert status == 400 and len(error["error"]) < 300
    assert raw_post(live, json.dumps({"analytic": "cpu_by_server", "target": "servers",
                                      "params": {"syms": ["s1"]}}).encode())[0] == 200


REFUSED = "request body too large: the limit is 4096 bytes (max_body_bytes)"


def refused_bodies(live):
    """(bodies refused, bytes the server read of them), from its metrics."""
    held = metrics(live)
    return (held.get(("lakestream_analytics_bodies_refused_total", ()), 0),
            held.get(("lakestream_analytics_refused_body_bytes_total", ()), 0))


def test_a_client_that_sends_its_whole_body_before_reading_gets_the_413(make_live):
    # urllib sends all of a body before it reads a byte of the reply (and says Connection:
    # close): a server that closes on it mid-body makes it see a reset, not the 413
    live = make_live(max_body_bytes=4096)
    size = 20_000_000
    piece = b"x" * 1_000_000
    for data in (piece * 20, (piece for _ in range(20))):  # Content-Length; chunked (no length)
        request = urllib.request.Request(live.url + "/subscriptions", data=data, method="POST",
                                         headers={"Authorization": "Bearer t-ann"})
        try:
            urllib.request.urlopen(request, timeout=60)
        except urllib.error.HTTPError as refused:
            assert refused.code == 413 and json.load(refused) == {"error": REFUSED}
            assert refused.headers["Connection"] == "close"
        else:
            raise AssertionError("a 20 MB body was accepted")
    # each body was read to its end (so the connection closed cleanly), and thrown away
    wait_for(lambda: refused_bodies(live) == (2, 2 * size))
    assert subscribe(live, ["s1"])[0] == 200


class RawPost:
    """POST /subscriptions on a plain socket declaring ``declared`` body bytes, of which a thread
    sends ``piece`` every ``pause`` seconds until all are sent or the server closes the
    connection; ``sent`` counts what the socket took. Keep-alive (no Connection: close)."""

    def __init__(self, live, declared, piece, pause=0.0):
        self.socket = socket.create_connection(("127.0.0.1", live.port), timeout=60)
        self.socket.sendall(b"POST /subscriptions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                            b"Authorization: Bearer t-ann\r\nContent-Length: %d\r\n\r\n" % declared)
        self.declared, self.piece, self.pause, self.sent = declared, piece, pause, 0
        self.sender = threading.Thread(target=self._send, daemon=True)
        self.sender.start()

    def _send(self):
        try:
            while self.sent < self.declared:
                part = self.piece[:self.declared - self.sent]
                self.socket.sendall(part)
                self.sent += len(part)
                time.sleep(self.pause)
        except OSError:
            pass  # the server closed the connection

    def reply(self):
        """The reply's head and body, read as soon as they come (the whole body not sent)."""
        head = b""
        while b"\r\n\r\n" not in head:
            head += self.socket.recv(65536)
        head, _, body = head.partition(b"\r\n\r\n")
        length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:")))
        while len(body) < length:
            body += self.socket.recv(65536)
        return head.split(b"\r\n"), json.loads(body)

    def closed(self):
        """Wait (up to the socket's timeout) for the server to close the connection."""
        try:
            while self.socket.recv(65536):
                pass
        except ConnectionResetError:
            pass  # closed with some of what was sent unread: the kernel answers with a reset
        finally:
            self.socket.close()
            self.sender.join(timeout=60)


def test_what_the_server_throws_away_of_a_refused_body_is_bounded(make_live):
    live = make_live(max_body_bytes=4096)
    # in bytes: far more than the server reads, and than the kernel's buffers could hold
    endless = RawPost(live, DISCARD_BYTES + 64 * 2**20, b"x" * 2**20)
    head, body = endless.reply()
    assert head[0].startswith(b"HTTP/1.1 413") and body == {"error": REFUSED}
    assert b"connection: close" in head
    endless.closed()
    assert endless.sent < endless.declared  # the server stopped reading: the client could not go on
    wait_for(lambda: refused_bodies(live)[0] == 1)
    # what it read: the bound, give or take one read of the ASGI server's (a few hundred KiB)
    assert DISCARD_BYTES <= refused_bodies(live)[1] <= DISCARD_BYTES + 2**20

    # in time: a client trickling its body gets the 413 at once and is cut off after the bound
    trickle = RawPost(live, 20_000_000, b"x", pause=0.2)
    trickle.socket.settimeout(DISCARD_SECONDS + 30)
    head, body = trickle.reply()
    refused_at = time.monotonic()
    assert head[0].startswith(b"HTTP/1.1 413") and body == {"error": REFUSED}
    trickle.closed()
    assert DISCARD_SECONDS - 0.5 < time.monotonic() - refused_at < DISCARD_SECONDS + 10
    wait_for(lambda: refused_bodies(live)[0] == 2)
    assert subscribe(live, ["s1"])[0] == 200


def test_each_user_holds_a_limited_number_of_handles(make_live):
    live = make_live(max_handles_per_user=3)
    handles = [subscribe(live, ["s1"])[1]["client"] for _ in range(3)]
    status, error = subscribe(live, ["s2"])
    assert status == 429 and "the limit is 3 (max_handles_per_user)" in error["error"]
    assert subscribe(live, ["s1"], token="t-bob")[0] == 200  # another user is not held back
    call(live, "DELETE", f"/subscriptions/{handles[0]}")
    assert subscribe(live, ["s2"])[0] == 200


def test_handles_without_an_open_stream_expire(make_live):
    # 3 s: the two subscribes and the refused third take well under that on a loaded machine
    live = make_live(idle_handle_seconds=3.0, grace_seconds=60, max_handles_per_user=2)
    idle = subscribe(live, ["s3"])[1]["client"]  # subscribes, never opens its stream
    streaming = subscribe(live, ["s1"])[1]["client"]
    assert subscribe(live, ["s2"])[0] == 429  # both slots held
    stream = Stream(live, streaming)

    # the poller's sweep expires the idle handle: its slot and its subscription are freed
    wait_for(lambda: [h["client"] for h in call(live, "GET", "/subscriptions")[1]] == [streaming],
             seconds=10)
    assert [s.params for s in live.manager.subscriptions("ann")] == [{"syms": ["s1"]}]
    expired = (f"subscription handle '{idle}' expired: no stream was open on it for 3 s "
               "(idle_handle_seconds); subscribe again")
    for method, path in (("GET", f"/subscriptions/{idle}/snapshot"),
                         ("DELETE", f"/subscriptions/{idle}")):
        assert call(live, method, path) == (404, {"error": expired})
    assert call(live, "GET", f"/stream/{idle}?token=t-ann", token=None) == (404, {"error": expired})
    never = (404, {"error": "no such subscription handle"})
    assert call(live, "GET", "/subscriptions/c-never-made/snapshot") == never
    assert call(live, "GET", f"/subscriptions/{idle}/snapshot", "t-bob") == never  # not bob's

    # the handle with its stream open outlives the idle time; the freed slot takes a new one
    since = time.monotonic()  # the stream was open before this
    wait_for(lambda: time.monotonic() - since > 3.2, seconds=5)
    assert live.server.clients[streaming].connected
    assert call(live, "GET", f"/subscriptions/{streaming}/snapshot")[0] == 200
    assert subscribe(live, ["s2"])[0] == 200

    # unused counts from the stream's end too (the grace period, 60 s, would release it later)
    stream.close()
    wait_for(lambda: streaming not in live.server.clients, seconds=10)
    assert call(live, "GET", f"/subscriptions/{streaming}/snapshot")[1]["error"].startswith(
        f"subscription handle '{streaming}' expired")
    wait_for(lambda: call(live, "GET", "/subscriptions")[1] == [], seconds=10)  # the third too
    assert live.manager.subscriptions("ann") == []
    assert metrics(live)[("lakestream_analytics_released_total", (("why", "expired"),))] == 3
