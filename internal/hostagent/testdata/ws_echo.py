# A WebSocket echo server on :9000 with only the standard library (RFC 6455 handshake and
# unfragmented frames), for the proxy test.
import base64, hashlib, socket, struct, threading

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def recvn(c, n):
    b = b""
    while len(b) < n:
        d = c.recv(n - len(b))
        if not d:
            raise EOFError
        b += d
    return b


def serve(c):
    head = b""
    while b"\r\n\r\n" not in head:
        d = c.recv(4096)
        if not d:
            return
        head += d
    key = [l.split(b":", 1)[1].strip() for l in head.split(b"\r\n") if l.lower().startswith(b"sec-websocket-key:")][0]
    accept = base64.b64encode(hashlib.sha1(key + GUID).digest())
    c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
              b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n")
    while True:
        b1, b2 = recvn(c, 2)
        n = b2 & 127
        if n == 126:
            n = struct.unpack(">H", recvn(c, 2))[0]
        elif n == 127:
            n = struct.unpack(">Q", recvn(c, 8))[0]
        mask = recvn(c, 4) if b2 & 128 else b"\0\0\0\0"
        data = bytes(x ^ mask[i % 4] for i, x in enumerate(recvn(c, n)))
        if b1 & 15 == 8:
            return
        head = bytes([0x80 | (b1 & 15)]) + (bytes([n]) if n < 126 else bytes([126]) + struct.pack(">H", n))
        c.sendall(head + data)


s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 9000))
s.listen()
while True:
    conn, _ = s.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
