// A node server with a dependency (vendor/greet, installed by npm ci: no registry needed). It
// answers its version and the dependency's greeting.
const http = require('http');
const fs = require('fs');
const greet = require('greet');
const version = fs.readFileSync(__dirname + '/version.txt', 'utf8').trim();
http.createServer((req, res) => res.end(`nodedeps ${version}: ${greet('you')}\n`)).listen(Number(process.env.PORT));
