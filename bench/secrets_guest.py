"""Runs in a debian sandbox for bench/secrets.sh: the same HTTPS requests to the world's
host through the secrets swap (allowed.test, a bound secret's host: intercepted) and
passed through untouched (other.test, same server, not intercepted), interleaved request
by request so a neighbour that slows the machine slows both alike. Each answer is
checked: the swapped side must have reached the server with the value (its digest is
given), the untouched side with the placeholder. Prints one JSON document.

    python3 secrets_guest.py REQUESTS DOWNLOAD_MIB SWAPPED_DIGEST
"""
import http.client
import json
import os
import ssl
import sys
import time

n, mib, swapped_digest = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
token = os.environ["TOKEN"]
ctx = ssl.create_default_context(cafile="/etc/atoll/ca-bundle.pem")
ctx.load_verify_locations("/world.pem")
SWAP, PASS = "allowed.test", "other.test"


def get(conn, path, expect=None):
    conn.request("GET", path, headers={"Authorization": "Bearer " + token})
    r = conn.getresponse()
    body = r.read()
    if r.status != 200:
        raise SystemExit(f"{path}: HTTP {r.status} {body[:200]!r}")
    if expect is not None and expect not in body.decode():
        raise SystemExit(f"{path}: the server did not get what was expected: {body!r}")
    return len(body)


def expect(host):
    return swapped_digest if host == SWAP else None


def stats(times):
    times = sorted(times)
    return {"p50_ms": 1000 * times[len(times) // 2], "p99_ms": 1000 * times[int(len(times) * 0.99) - 1]}


out = {"requests": n, "download_mib": mib}
# Kept-alive connections: the cost of the swap per request.
conns = {h: http.client.HTTPSConnection(h, context=ctx, timeout=120) for h in (SWAP, PASS)}
for h, c in conns.items():
    for _ in range(5):
        get(c, "/auth-digest", expect(h))
times = {SWAP: [], PASS: []}
for _ in range(n):
    for h, c in conns.items():
        t = time.perf_counter()
        get(c, "/auth-digest", expect(h))
        times[h].append(time.perf_counter() - t)
for h in (SWAP, PASS):
    out[f"{h}/keepalive"] = dict(stats(times[h]), rps=len(times[h]) / sum(times[h]))
# A new connection per request: TLS handshakes included (the swap makes two).
times = {SWAP: [], PASS: []}
for _ in range(max(n // 5, 10)):
    for h in (SWAP, PASS):
        t = time.perf_counter()
        c = http.client.HTTPSConnection(h, context=ctx, timeout=120)
        get(c, "/auth-digest", expect(h))
        c.close()
        times[h].append(time.perf_counter() - t)
for h in (SWAP, PASS):
    out[f"{h}/newconn"] = dict(stats(times[h]), rps=len(times[h]) / sum(times[h]))
# A large download: best of 3 each, interleaved.
best = {SWAP: 0.0, PASS: 0.0}
for _ in range(3):
    for h, c in conns.items():
        t = time.perf_counter()
        got = get(c, f"/bytes/{mib << 20}")
        assert got == mib << 20, got
        best[h] = max(best[h], mib / (time.perf_counter() - t))
for h in (SWAP, PASS):
    out[f"{h}/download_mib_s"] = best[h]
print(json.dumps(out))
