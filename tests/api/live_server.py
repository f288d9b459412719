"""A real HTTP server for tests: uvicorn on a free 127.0.0.1 port, in a
background thread of the test process."""

from __future__ import annotations

import threading
import time

import uvicorn

from api.server.listener import bind_listener, url_of


class LiveServer:
    def __init__(self, app):
        self._socket = bind_listener("127.0.0.1", 0)
        self.url = url_of(self._socket)
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._socket]},
                                        name="live-server", daemon=True)

    def __enter__(self) -> LiveServer:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the test server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._socket.close()
