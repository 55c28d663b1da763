// @grpc/grpc-js against a server of the conformance suite's test service (t.S, bytes in
// and out). Usage: node grpc_conformance.js PORT. Runs each case, prints one JSON line
// of their outcomes, closes the channel with a half-closed stream still open (as the
// official client's shutdown does) and exits 0; an error emitted after that ends the
// process with an uncaught exception.
'use strict';

const grpc = require('@grpc/grpc-js');

const MIB = 1024 * 1024;
const bytes = { serialize: b => b, deserialize: b => b };
const method = (path, requestStream, responseStream) => ({
  path,
  requestStream,
  responseStream,
  requestSerialize: bytes.serialize,
  requestDeserialize: bytes.deserialize,
  responseSerialize: bytes.serialize,
  responseDeserialize: bytes.deserialize,
});
const Client = grpc.makeGenericClientConstructor({
  echo: method('/t.S/Echo', false, false),
  size: method('/t.S/Size', false, false),
  hang: method('/t.S/Hang', false, false),
  refuse: method('/t.S/Refuse', false, false),
  nope: method('/t.S/Nope', false, false),
  count: method('/t.S/Count', false, true),
  chunks: method('/t.S/Chunks', false, true),
  chat: method('/t.S/Chat', true, true),
  drain: method('/t.S/Drain', true, true),
});

function unary(client, name, request, options = {}, metadata = new grpc.Metadata()) {
  return new Promise(resolve => {
    client[name](request, metadata, options, (error, response) => {
      resolve(error ? { code: error.code, details: error.details } : { code: 0, response });
    });
  });
}

function collect(call) {
  return new Promise(resolve => {
    const got = [];
    call.on('data', message => got.push(message));
    call.on('error', error => resolve({ code: error.code, details: error.details, got }));
    call.on('status', status => {
      if (status.code === 0) resolve({ code: 0, got });
    });
  });
}

async function main() {
  const port = process.argv[2];
  const client = new Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure(), {
    'grpc.max_receive_message_length': -1,
    'grpc.max_send_message_length': -1,
  });
  const out = {};
  const metadata = new grpc.Metadata();
  metadata.set('x-mq-client-id', 'node-1');
  metadata.set('trace-bin', Buffer.from([0, 255]));
  const echo = await unary(client, 'echo', Buffer.from('hi'), { deadline: Date.now() + 10000 }, metadata);
  out.echo = echo.response.toString('latin1');

  const counted = await collect(client.count(Buffer.from('5')));
  out.count = [counted.code, counted.got.map(b => b.toString())];

  const chat = client.chat();
  const chatted = collect(chat);
  for (const word of ['one', 'two']) chat.write(Buffer.from(word));
  chat.end(); // half-close
  const chatResult = await chatted;
  out.chat = [chatResult.code, chatResult.got.map(b => b.toString())];

  const drain = client.drain();
  const drained = collect(drain);
  for (let i = 0; i < 3; i++) drain.write(Buffer.from('r'));
  drain.end();
  const drainResult = await drained;
  out.drain = [drainResult.code, drainResult.got.map(b => b.toString())];

  const hung = client.hang(Buffer.alloc(0), () => {});
  const cancelled = new Promise(resolve => hung.on('status', status => resolve(status.code)));
  setTimeout(() => hung.cancel(), 200);
  out.cancel = await cancelled;

  out.deadline = (await unary(client, 'hang', Buffer.alloc(0), { deadline: Date.now() + 300 })).code;
  out.refuse = await unary(client, 'refuse', Buffer.from('why'));
  out.nope = (await unary(client, 'nope', Buffer.alloc(0))).code;

  const big = await unary(client, 'size', Buffer.alloc(4 * MIB, 120), { deadline: Date.now() + 30000 });
  out.size_4mib = big.response.toString();
  const chunks = await collect(client.chunks(Buffer.from(`${4 * MIB}x3`)));
  out.chunks_4mib = [chunks.code, chunks.got.map(b => [b.length, b[0]])];

  const many = await Promise.all(
    Array.from({ length: 500 }, (_, n) => unary(client, 'size', Buffer.alloc(n, 120)))
  );
  out.concurrent = many.every((r, n) => r.code === 0 && r.response.toString() === String(n));

  // The official client's shutdown: a stream in use is half-closed, loses its
  // listeners, and the channel closes at once.
  const last = client.chat();
  const answered = new Promise(resolve => last.once('data', resolve));
  last.write(Buffer.from('bye'));
  out.last = (await answered).toString();
  last.end();
  last.removeAllListeners();
  client.close();
  process.stdout.write(JSON.stringify(out) + '\n');
}

main().catch(error => {
  process.stderr.write(`failed: ${error && error.stack ? error.stack : error}\n`);
  process.exit(2);
});
