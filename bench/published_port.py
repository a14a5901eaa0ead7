"""Requests through a published port against the same requests made inside the guest:
sequential HTTP/1.0 GETs of a small file, a new connection each (the worst case for the
forwarding path: every request is a new ConnectPort call); prints requests per second
and the p50 / p90 time from connect to the first response byte.

    atoll create --template debian --name pp --publish 8000
    atoll -s pp run -d --cwd /tmp -- python3 -m http.server 8000 --bind 127.0.0.1
    atoll -s pp write /root/published_port.py < bench/published_port.py
    atoll -s pp exec -- python3 /root/published_port.py http://127.0.0.1:8000/ 300   # in the guest
    python3 bench/published_port.py "$(atoll port ls pp --json | jq -r '.[0].url')/" 300    # through the port
    atoll kill pp
"""
import socket, sys, time
from urllib.parse import urlsplit

url = urlsplit(sys.argv[1])
n = int(sys.argv[2]) if len(sys.argv) > 2 else 300
req = f"GET {url.path or '/'} HTTP/1.0\r\nHost: {url.hostname}\r\n\r\n".encode()

def one():
    t = time.perf_counter()
    s = socket.create_connection((url.hostname, url.port), timeout=30)
    s.sendall(req)
    first = s.recv(65536)
    ttfb = time.perf_counter() - t
    assert first.startswith(b"HTTP/1."), first[:40]
    while s.recv(65536):
        pass
    s.close()
    return ttfb

for _ in range(20):
    one()
start = time.perf_counter()
ttfbs = sorted(one() for _ in range(n))
elapsed = time.perf_counter() - start
print(f"{n / elapsed:.0f} requests/s, first byte p50 {ttfbs[n // 2] * 1e3:.2f} ms, p90 {ttfbs[n * 9 // 10] * 1e3:.2f} ms")
