"""Two TCP flows from two hosts into one, with the same source and destination ports:
``python flows_helper.py recv PORT N BYTES`` prints each flow's rate as JSON;
``python flows_helper.py send ADDR PORT SPORT BYTES`` sends from source port SPORT.
(A test tool for the emulator's per-flow cap; the runtime never opens sockets itself.)"""

import json
import socket
import sys
import threading
import time


def recv(port: int, n: int, nbytes: int) -> None:
    srv = socket.create_server(("0.0.0.0", port))
    srv.settimeout(60)
    rates = {}

    def drain(conn: socket.socket, peer: str) -> None:
        got, t0 = 0, None
        while got < nbytes:
            b = conn.recv(1 << 20)
            if not b:
                break
            t0 = t0 or time.perf_counter()
            got += len(b)
        rates[peer] = got / (time.perf_counter() - t0)

    threads = []
    for _ in range(n):
        conn, (addr, sport) = srv.accept()
        t = threading.Thread(target=drain, args=(conn, f"{addr}:{sport}"))
        t.start()
        threads.append(t)
    for t in threads:
        t.join(60)
    print("RATES " + json.dumps(rates), flush=True)


def send(addr: str, port: int, sport: int, nbytes: int) -> None:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", sport))
    for _ in range(100):
        try:
            s.connect((addr, port))
            break
        except ConnectionRefusedError:
            time.sleep(0.05)
    s.sendall(b"\0" * nbytes)
    s.close()


if __name__ == "__main__":
    if sys.argv[1] == "recv":
        recv(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
    else:
        send(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
