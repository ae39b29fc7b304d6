// The hand-rolled stack a team might write instead of TopicLedger, for the per-token subscribe row of the
// benchmark (issue 53): Node's `http` module in front of Redis with `appendfsync always`, one
// MULTI / SADD topic:<T> <token> / SADD inst:<token> <T> / EXEC per request, answered 200 once Redis has
// answered EXEC (after its fsync). No log, no audit, no proofs, no validation beyond the route and the key.
//
//   node node-redis-subscribe.js --port P --redis-port R [--connections N]
//
// Node 20 without npm: the RESP client is the few lines below, pipelined over N connections to Redis (8 by
// default), each reply matched to its request in order.
"use strict";
const http = require("http");
const net = require("net");

const args = Object.fromEntries(
  process.argv.slice(2).reduce((pairs, value, index, all) => (index % 2 ? pairs : [...pairs, [all[index].replace(/^--/, ""), all[index + 1]]]), []));
const port = Number(args.port);
const redisPort = Number(args["redis-port"]);
const connections = Number(args.connections || 8);
const admin = "Bearer owner";
const route = /^\/v1\/projects\/([^/]+)\/registrations\/([^/?]+)\/topicSubscriptions\?topicName=([^&]+)$/;

// One Redis connection: commands written as RESP arrays, replies parsed in order; each request waits for the
// fourth reply of its MULTI/SADD/SADD/EXEC (EXEC's array).
function redisConnection() {
  const socket = net.createConnection({ port: redisPort, host: "127.0.0.1" });
  socket.setNoDelay(true);
  const waiting = []; // callbacks, one per EXEC, in order
  let buffer = Buffer.alloc(0);
  let repliesInRequest = 0;
  // The end of one reply at `offset`, or -1 when it is not all here yet.
  function replyEnd(offset) {
    if (offset >= buffer.length) return -1;
    const line = buffer.indexOf("\r\n", offset);
    if (line < 0) return -1;
    const type = String.fromCharCode(buffer[offset]);
    if (type === "+" || type === "-" || type === ":") return line + 2;
    const count = Number(buffer.toString("latin1", offset + 1, line));
    if (type === "$") return count < 0 ? line + 2 : (line + 2 + count + 2 <= buffer.length ? line + 2 + count + 2 : -1);
    let end = line + 2;
    for (let index = 0; index < count; index++) {
      end = replyEnd(end);
      if (end < 0) return -1;
    }
    return end;
  }
  socket.on("data", (chunk) => {
    buffer = buffer.length ? Buffer.concat([buffer, chunk]) : chunk;
    let offset = 0;
    for (;;) {
      const end = replyEnd(offset);
      if (end < 0) break;
      const failed = buffer[offset] === 0x2d; // '-'
      offset = end;
      repliesInRequest += 1;
      if (repliesInRequest === 4) {
        repliesInRequest = 0;
        waiting.shift()(failed);
      }
    }
    buffer = buffer.subarray(offset);
  });
  socket.on("error", (error) => { console.error("redis:", error.message); process.exit(1); });
  function command(parts) {
    let text = `*${parts.length}\r\n`;
    for (const part of parts) text += `$${Buffer.byteLength(part)}\r\n${part}\r\n`;
    return text;
  }
  return {
    subscribe(token, topic, done) {
      waiting.push(done);
      socket.write(command(["MULTI"]) + command(["SADD", `topic:${topic}`, token]) +
        command(["SADD", `inst:${token}`, topic]) + command(["EXEC"]));
    },
  };
}

const pool = Array.from({ length: connections }, redisConnection);
let next = 0;

http.createServer((request, response) => {
  const match = request.method === "POST" ? route.exec(request.url) : null;
  request.resume();
  if (request.url === "/healthz") {
    response.writeHead(200, { "content-type": "application/json" });
    response.end('{"status":"ok"}');
    return;
  }
  if (!match) {
    response.writeHead(404, { "content-type": "application/json" });
    response.end('{"error":{"code":404}}');
    return;
  }
  if (request.headers.authorization !== admin) {
    response.writeHead(401, { "content-type": "application/json" });
    response.end('{"error":{"code":401}}');
    return;
  }
  const token = decodeURIComponent(match[2]);
  const topic = decodeURIComponent(match[3]);
  request.on("end", () => {
    pool[next++ % pool.length].subscribe(token, topic, (failed) => {
      response.writeHead(failed ? 500 : 200, { "content-type": "application/json" });
      response.end("{}");
    });
  });
}).listen(port, "127.0.0.1", () => console.log(`node+redis peer on http://127.0.0.1:${port}`));
