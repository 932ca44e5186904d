# An endpoint of the udp-flows harness: answers each datagram with its
# name before it, from ADDR:PORT.
import socket
import sys

name, addr, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
s = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET, socket.SOCK_DGRAM)
s.bind((addr, port))
print("ready", flush=True)
while True:
    data, peer = s.recvfrom(2048)
    s.sendto(name.encode() + b" " + data, peer)
