"""Durable 1 KiB writes inside a sandbox with a disk: temp file, write, fsync, rename,
fsync of the directory (what WriteFile does with `sync`), 200 times after 20 warm-ups; prints
p50 and p90. This is what the overlay's cache mode costs a guest program.

    atoll create --template debian --name dw
    atoll -s dw write /root/guest_durable_write.py < bench/guest_durable_write.py
    atoll -s dw exec -- python3 /root/guest_durable_write.py
    atoll kill dw
"""
import os, time
d = "/root/fs"; os.makedirs(d, exist_ok=True)
def one(i):
    p = f"{d}/t{i}"
    fd = os.open(p + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(fd, b"x" * 1024); os.fsync(fd); os.close(fd)
    os.rename(p + ".tmp", p)
    dfd = os.open(d, os.O_RDONLY); os.fsync(dfd); os.close(dfd)
for i in range(20): one(i)
ts = []
for i in range(200):
    t = time.perf_counter(); one(i); ts.append(time.perf_counter() - t)
ts.sort()
print(f"durable 1 KiB write in guest: p50 {ts[100]*1e6:.0f} us, p90 {ts[180]*1e6:.0f} us")
