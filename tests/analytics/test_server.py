"""The HTTP server: tokens, isolation, bad parameters, pushes over server-sent events,
disconnect cleanup and slow clients."""

import json
import queue
import threading
import time
import urllib.error
import urllib.request


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
    """Reads a server-sent-events stream in a thread; ``events`` gets each (event, data)."""

    def __init__(self, live, client, token="t-ann"):
        self.response = urllib.request.urlopen(f"{live.url}/stream/{client}?token={token}", timeout=60)
        self.events = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        event = None
        try:
            for raw in self.response:
                line = raw.decode().rstrip("\n")
                if line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("data: "):
                    self.events.put((event, json.loads(line[6:])))
        except Exception:
            pass  # closed by the test

    def next(self, seconds=60):
        return self.events.get(timeout=seconds)


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
    assert event == "delta" and delta["batch_id"] == 2
    assert [(r["sym"], r["cpu"]) for r in delta["rows"]] == [("s1", 11.0)]

    caught_up = call(live, "GET", f"/subscriptions/{handle['client']}/deltas?after=1")[1]["deltas"]
    assert [(d["batch_id"], d["rows"][0]["cpu"]) for d in caught_up] == [(2, 11.0)]  # resumable
    assert call(live, "GET", f"/subscriptions/{handle['client']}/deltas?after=x")[0] == 400

    stream.response.close()  # the client goes away; after the grace period its handle is released
    wait_for(lambda: call(live, "GET", "/subscriptions")[1] == [])
    assert live.manager.subscriptions("ann") == []


def test_a_slow_client_is_dropped_with_the_reason(live):
    _, handle = subscribe(live, ["s1"])   # never reads its stream; its queue holds 2 deltas
    for cpu in (1.0, 2.0, 3.0):
        live.feed([{"sym": "s1", "cpu": cpu}])
    wait_for(lambda: live.server.clients[handle["client"]].dropped is not None, seconds=60)
    status, error = call(live, "GET", f"/stream/{handle['client']}?token=t-ann")
    assert status == 410 and error["error"].startswith("slow client")
    assert live.manager.subscriptions("ann") == []
