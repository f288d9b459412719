"""The API's listening socket, bound before uvicorn starts so the URL printed
(and a test's free port) is the real one.

The socket is made with `IPPROTO_TCP` named: asyncio turns Nagle's algorithm
off (TCP_NODELAY) only on sockets whose `proto` says TCP, and
`socket.create_server` leaves it 0. With Nagle on, each response's body
waits for the client's delayed ACK of its headers: ~40 ms a request.
"""

from __future__ import annotations

import socket

# How uvicorn serves the API: `brigade serve`, and bench.api's peer alike. libuv's
# event loop (uvloop) and the httptools parser, both in the `server` extra, in place
# of asyncio's loop and h11: the loop's and the parser's work in C, what every request
# on the one interpreter waits behind (bench.api: 3-4% more requests/s one client at a
# time on GET /v1/jobs/{id}, 2-40% on GET /v1/jobs).
SERVE_OPTIONS: dict = {"loop": "uvloop", "http": "httptools", "log_config": None}


def bind_listener(host: str, port: int) -> socket.socket:
    family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                  proto=socket.IPPROTO_TCP)[0]
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(socket.SOMAXCONN)
    except OSError:
        sock.close()
        raise
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
