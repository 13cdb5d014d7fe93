// A plain node server without dependencies: answers its version (version.txt) and what the
// build left (built.txt).
const http = require('http');
const fs = require('fs');
const version = fs.readFileSync(__dirname + '/version.txt', 'utf8').trim();
const built = fs.existsSync(__dirname + '/built.txt');
// The operator's extra CA certificates (--guest-ca-file), when there are any.
const extraCA = process.env.NODE_EXTRA_CA_CERTS ? fs.readFileSync(process.env.NODE_EXTRA_CA_CERTS, 'utf8') : '';
const bundleHasCA = extraCA !== '' && fs.readFileSync(process.env.SSL_CERT_FILE, 'utf8').includes(extraCA.trim());
http.createServer((req, res) => {
  if (req.url === '/env') {
    res.setHeader('Content-Type', 'application/json');
    res.end(JSON.stringify({ greeting: process.env.GREETING, tokenLength: (process.env.API_TOKEN || '').length,
      extraCA: extraCA.includes('BEGIN CERTIFICATE'), bundleHasCA }));
    return;
  }
  res.end(`node ${version} built=${built}\n`);
}).listen(Number(process.env.PORT), () => console.log(`listening on ${process.env.PORT} with token ${process.env.API_TOKEN}`));
