// A plain node server without dependencies: answers its version (version.txt) and what the
// build left (built.txt).
const http = require('http');
const fs = require('fs');
const version = fs.readFileSync(__dirname + '/version.txt', 'utf8').trim();
const built = fs.existsSync(__dirname + '/built.txt');
// The operator's extra CA certificates (--guest-ca-file), when there are any.
const extraCA = process.env.NODE_EXTRA_CA_CERTS ? fs.readFileSync(process.env.NODE_EXTRA_CA_CERTS, 'utf8') : '';
const bundleHasCA = extraCA !== '' && fs.readFileSync(process.env.SSL_CERT_FILE, 'utf8').includes(extraCA.trim());
const server = http.createServer((req, res) => {
  if (req.url === '/env') {
    res.setHeader('Content-Type', 'application/json');
    res.end(JSON.stringify({ greeting: process.env.GREETING, tokenLength: (process.env.API_TOKEN || '').length,
      extraCA: extraCA.includes('BEGIN CERTIFICATE'), bundleHasCA }));
    return;
  }
  if (req.url === '/instance') { // which instance answers (the test writes a name into each)
    fs.readFile('/home/user/instance.txt', 'utf8', (err, name) => res.end(err ? 'unnamed' : name));
    return;
  }
  res.end(`node ${version} built=${built}\n`);
});
// A WebSocket echo on /ws (RFC 6455, no library): "hello <version>" first, then every text or
// binary message back as it came.
const frame = (op, data) => {
  const n = data.length;
  const head = n < 126 ? Buffer.from([0x80 | op, n]) : n < 65536 ? Buffer.from([0x80 | op, 126, n >> 8, n & 255])
    : Buffer.concat([Buffer.from([0x80 | op, 127]), (() => { const b = Buffer.alloc(8); b.writeBigUInt64BE(BigInt(n)); return b; })()]);
  return Buffer.concat([head, data]);
};
server.on('upgrade', (req, sock) => {
  const key = req.headers['sec-websocket-key'];
  if (req.url !== '/ws' || !key) {
    sock.end('HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n');
    return;
  }
  const accept = require('crypto').createHash('sha1').update(key + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11').digest('base64');
  sock.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\n\r\n`);
  sock.write(frame(1, Buffer.from(`hello ${version}`)));
  let buf = Buffer.alloc(0);
  sock.on('data', (chunk) => {
    buf = Buffer.concat([buf, chunk]);
    for (;;) {
      if (buf.length < 2) return;
      const op = buf[0] & 15;
      let n = buf[1] & 127, off = 2;
      if (n === 126) { if (buf.length < 4) return; n = buf.readUInt16BE(2); off = 4; }
      else if (n === 127) { if (buf.length < 10) return; n = Number(buf.readBigUInt64BE(2)); off = 10; }
      const mask = buf[1] & 128 ? buf.subarray(off, off + 4) : null;
      if (mask) off += 4;
      if (buf.length < off + n) return;
      const data = Buffer.from(buf.subarray(off, off + n));
      buf = buf.subarray(off + n);
      if (mask) for (let i = 0; i < n; i++) data[i] ^= mask[i % 4];
      if (op === 8) { sock.end(frame(8, data.subarray(0, 2))); return; }
      sock.write(frame(op === 9 ? 10 : op, data));
    }
  });
  sock.on('error', () => {});
});
server.listen(Number(process.env.PORT), () => console.log(`listening on ${process.env.PORT} with token ${process.env.API_TOKEN}`));
