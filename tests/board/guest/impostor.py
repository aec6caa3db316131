"""An impostor for the board test: a TLS server on the board's address and port with a
certificate of its own, standing where the daemon was (the daemon is stopped meanwhile), as a
device on the link that took the board's address would. Standard library only.

  python3 impostor.py CERT KEY

Prints one JSON line when listening ({"ready": true}), one per handshake ({"handshake": ...})
and one per request it read ({"request": N bytes, "authorization": bool}): a phone that pins
the board's key must never get as far as sending one.
"""

from __future__ import annotations

import json
import socket
import ssl
import sys


def main() -> int:
    cert, key = sys.argv[1], sys.argv[2]
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("192.168.42.1", 8080))
        listener.listen(16)
        print(json.dumps({"ready": True}), flush=True)
        while True:
            raw, peer = listener.accept()
            raw.settimeout(10)
            try:
                with ctx.wrap_socket(raw, server_side=True) as conn:
                    print(json.dumps({"handshake": peer[0]}), flush=True)
                    data = conn.recv(65536)
                    if data:
                        seen = {"request": len(data), "authorization": b"Bearer" in data}
                        print(json.dumps(seen), flush=True)
                        body = b'{"impostor": true}'
                        conn.sendall(
                            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                            b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body)
                        )
            except (OSError, ssl.SSLError) as exc:
                print(json.dumps({"closed": type(exc).__name__}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
