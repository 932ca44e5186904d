# The UDP client of the udp-flows harness, run in the client's namespace:
# FLOWS flows (one socket each, source ports BASE..BASE+FLOWS), each sending
# RATE datagrams a second ("FLOW SEQ") to VIP:PORT and reading the answers
# ("ENDPOINT FLOW SEQ"). Each line on stdin is a mark, timed on the same
# clock as the datagrams; "stop" ends the run. Prints one JSON object: the
# marks, and each datagram as [flow, seq, sent, endpoint, answered]
# (endpoint and answered null when no answer came).
import json
import select
import socket
import sys
import threading
import time

vip, port, flows, rate, base = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
family = socket.AF_INET6 if ":" in vip else socket.AF_INET
socks = []
for i in range(flows):
    s = socket.socket(family, socket.SOCK_DGRAM)
    s.bind(("", base + i))
    s.setblocking(False)
    socks.append(s)
flow_of = {s.fileno(): i for i, s in enumerate(socks)}
poller = select.poll()
for s in socks:
    poller.register(s, select.POLLIN)

sent = []
answers = {}
marks = []
stop = threading.Event()


def read_marks():
    for line in sys.stdin:
        marks.append([time.monotonic(), line.strip()])
        if line.strip() == "stop":
            break
    stop.set()


def drain(timeout_ms):
    for fd, _ in poller.poll(timeout_ms):
        s = socks[flow_of[fd]]
        while True:
            try:
                data = s.recv(2048)
            except OSError:
                break
            parts = data.decode(errors="replace").split()
            if len(parts) == 3:
                answers[(int(parts[1]), int(parts[2]))] = (parts[0], time.monotonic())


threading.Thread(target=read_marks, daemon=True).start()
print("ready", flush=True)
interval = 1.0 / rate
start = time.monotonic()
next_at = [start + interval * i / flows for i in range(flows)]
seq = [0] * flows
while not stop.is_set():
    now = time.monotonic()
    for i in range(flows):
        if now >= next_at[i]:
            seq[i] += 1
            try:
                socks[i].sendto(f"{i} {seq[i]}".encode(), (vip, port))
            except OSError:
                pass
            sent.append([i, seq[i], now])
            next_at[i] += interval
    drain(max(0, int((min(next_at) - time.monotonic()) * 1000)))
end = time.monotonic() + 1.0
while time.monotonic() < end:
    drain(100)
datagrams = [[f, q, t] + list(answers.get((f, q), (None, None))) for f, q, t in sent]
print(json.dumps({"marks": marks, "datagrams": datagrams}), flush=True)
