"""A loopback HTTP server for download tests: answers with Range support, can cut a response."""
from __future__ import annotations

import http.server
import re
import threading


def send_ranged(handler: http.server.BaseHTTPRequestHandler, data: bytes,
                honour_range: bool = True, cut: int | None = None) -> bool:
    """Answer `handler`'s GET with `data`: 206 from the byte a `Range: bytes=N-` header asks
    for (416 past the end), 200 without one or when not `honour_range`. With `cut`, only that
    many bytes of the body are sent and the connection is closed (a transfer cut short).
    Returns whether a body was sent (False for a 416), i.e. whether `cut` was used."""
    start = 0
    match = re.match(r"bytes=(\d+)-$", handler.headers.get("Range") or "")
    if match and honour_range:
        start = int(match.group(1))
        if start >= len(data):
            handler.send_response(416)
            handler.send_header("Content-Range", f"bytes */{len(data)}")
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return False
        handler.send_response(206)
        handler.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
    else:
        handler.send_response(200)
    handler.send_header("Content-Type", "application/octet-stream")
    handler.send_header("Content-Length", str(len(data) - start))
    handler.end_headers()
    body = data[start:]
    if cut is not None:
        body = body[:cut]
        handler.close_connection = True
    handler.wfile.write(body)
    return True


def loopback(handler_class) -> tuple[http.server.ThreadingHTTPServer, str, threading.Thread]:
    """(server, its base URL, the thread to start to serve) for `handler_class` on 127.0.0.1."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler_class)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    return server, f"http://127.0.0.1:{server.server_address[1]}", thread
