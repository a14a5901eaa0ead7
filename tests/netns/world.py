#!/usr/bin/env python3
"""The test hosts of the "outside world" (run inside the world network namespace).

HTTP on :80 and HTTPS on :443 on every address of the namespace (one self-signed
certificate for every test name), a TCP echo on :7. Each HTTP(S) reply names what the
server saw, so a test can tell which name reached it:
    "hello from <server address> host=<Host header> sni=<TLS SNI or ->"
GET /auth-digest adds the sha256 of the Authorization header; GET /headers adds every request header (and echoes Authorization in the response
header X-Echo-Authorization). GET /git/PATH serves the files under <cert's dir>/git (git's
dumb HTTP protocol, for bare repositories after `git update-server-info`), only to Basic
auth `x-access-token:TOKEN` where TOKEN is the content of <cert's dir>/git-token (401
otherwise, or when there is no such file). GET /bytes/N streams N bytes (for throughput benchmarks); POST /count reads the body
and answers "received N bytes". GET /ws with `Upgrade: websocket` is a WebSocket
(RFC 6455) echo: its first message is "auth-sha256=<sha256 of the handshake's
Authorization>", then each message comes back as it was sent. Prints "ready" once every
socket listens; exits when stdin closes (its parent, the test, is gone).
"""
import http.server
import socket
import socketserver
import ssl
import sys
import threading


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        if self.headers.get("Upgrade", "").lower() == "websocket":
            return self.websocket()
        if self.path.startswith("/git/"):
            return self.serve_git()
        if self.path.startswith("/bytes/"):
            return self.send_bytes(int(self.path[len("/bytes/"):]))
        if self.path == "/page":
            return self.send_page()
        sni = getattr(self.connection, "sni", None) or "-"
        body = "hello from {} host={} sni={}\n".format(
            self.connection.getsockname()[0], self.headers.get("Host", "-"), sni
        )
        if self.path.startswith("/auth-digest"):
            # What arrived, without showing it: sha256 of the Authorization header.
            import hashlib
            body += "auth-sha256={}\n".format(
                hashlib.sha256(self.headers.get("Authorization", "").encode()).hexdigest()
            )
        if self.path.startswith("/headers"):
            # Every request header, one a line (the secrets tests read what arrived).
            body += "".join("{}: {}\n".format(k, v) for k, v in self.headers.items())
        body = body.encode()
        self.send_response(200)
        auth = self.headers.get("Authorization")
        if self.path.startswith("/headers") and auth:
            # Sent back in a response header too: the swap must scrub it.
            self.send_header("X-Echo-Authorization", auth)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def serve_git(self):
        import base64
        import os
        import urllib.parse

        base = os.path.dirname(os.path.abspath(sys.argv[1]))
        try:
            with open(os.path.join(base, "git-token")) as f:
                token = f.read().strip()
        except OSError:
            token = ""
        want = "Basic " + base64.b64encode(("x-access-token:" + token).encode()).decode()
        if not token or self.headers.get("Authorization", "") != want:
            return self.reply(401, b"authentication required\n", [("WWW-Authenticate", 'Basic realm="git"')])
        root = os.path.realpath(os.path.join(base, "git"))
        rel = urllib.parse.unquote(self.path[len("/git/"):].split("?", 1)[0])
        path = os.path.realpath(os.path.join(root, rel))
        if not path.startswith(root + os.sep) or not os.path.isfile(path):
            return self.reply(404, b"not found\n", [])
        with open(path, "rb") as f:
            self.reply(200, f.read(), [])

    def reply(self, code, body, headers):
        self.send_response(code)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Type", "text/plain" if code != 200 else "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        got = 0
        while got < n:
            chunk = self.rfile.read(min(65536, n - got))
            if not chunk:
                break
            got += len(chunk)
        body = "received {} bytes\n".format(got).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def send_page(self):
        # A page for a browser: all magenta (a colour no desktop shows), titled.
        body = (
            b"<html><head><title>world page</title></head>"
            b"<body style='margin:0;background:#ff00ff;height:100vh'></body></html>"
        )
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def send_bytes(self, n):
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(n))
        self.end_headers()
        chunk = b"x" * 65536
        while n > 0:
            k = min(n, len(chunk))
            self.wfile.write(chunk[:k])
            n -= k

    def websocket(self):
        import base64
        import hashlib
        key = self.headers.get("Sec-WebSocket-Key", "")
        magic = key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", base64.b64encode(hashlib.sha1(magic.encode()).digest()).decode())
        self.end_headers()
        self.close_connection = True
        auth = hashlib.sha256(self.headers.get("Authorization", "").encode()).hexdigest()
        self.ws_send(0x81, ("auth-sha256=" + auth).encode())
        while True:
            head = self.rfile.read(2)
            if len(head) < 2:
                return
            n = head[1] & 0x7F
            if n == 126:
                n = int.from_bytes(self.rfile.read(2), "big")
            elif n == 127:
                n = int.from_bytes(self.rfile.read(8), "big")
            mask = self.rfile.read(4) if head[1] & 0x80 else b"\0\0\0\0"
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(self.rfile.read(n)))
            opcode = head[0] & 0x0F
            if opcode == 0x8:
                return self.ws_send(0x88, data[:2])
            if opcode == 0x9:
                self.ws_send(0x8A, data)
            elif opcode != 0xA:
                self.ws_send(head[0], data)

    def ws_send(self, first, data):
        n = len(data)
        if n < 126:
            head = bytes([first, n])
        elif n < 65536:
            head = bytes([first, 126]) + n.to_bytes(2, "big")
        else:
            head = bytes([first, 127]) + n.to_bytes(8, "big")
        self.wfile.write(head + data)

    def log_message(self, *args):
        pass


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class TlsServer(Server):
    def __init__(self, addr, handler, context):
        super().__init__(addr, handler)
        self.context = context

    def get_request(self):
        sock, addr = self.socket.accept()
        return self.context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), addr

    def finish_request(self, request, client_address):
        try:
            request.do_handshake()
        except (ssl.SSLError, OSError):
            return
        super().finish_request(request, client_address)


class Echo(socketserver.BaseRequestHandler):
    def handle(self):
        while True:
            data = self.request.recv(65536)
            if not data:
                return
            self.request.sendall(data)


class EchoServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    cert, key = sys.argv[1], sys.argv[2]
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)

    def remember_sni(sslsock, name, _ctx):
        sslsock.sni = name

    context.sni_callback = remember_sni
    servers = [
        Server(("0.0.0.0", 80), Handler),
        TlsServer(("0.0.0.0", 443), Handler, context),
        EchoServer(("0.0.0.0", 7), Echo),
    ]
    for s in servers:
        threading.Thread(target=s.serve_forever, daemon=True).start()
    print("ready", flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    main()
