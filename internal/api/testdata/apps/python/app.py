# A standard-library python app: answers on $PORT.
import http.server
import os


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("python ok " + self.path + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


http.server.ThreadingHTTPServer(("0.0.0.0", int(os.environ["PORT"])), Handler).serve_forever()
