// The official Node.js client's life against a broker: a Producer sends and shuts down,
// then a SimpleConsumer receives, acknowledges and shuts down. Usage:
//   node official_shutdown.js PORT TOPIC GROUP
// Prints one JSON line ({"sent": N, "received": N}) and exits 0 once both clients shut
// down; an error emitted after a shutdown (on the Telemetry stream) ends the process
// with an uncaught exception, as it would a user's service.
'use strict';

const { Producer, SimpleConsumer } = require('rocketmq-client-nodejs');

async function main() {
  const [port, topic, group] = process.argv.slice(2);
  const endpoints = `127.0.0.1:${port}`;
  const producer = new Producer({ endpoints, topics: [topic] });
  await producer.startup();
  let sent = 0;
  for (let i = 0; i < 3; i++) {
    await producer.send({ topic, tag: 'node', body: Buffer.from(`node-${i}`) });
    sent += 1;
  }
  await producer.shutdown();

  const consumer = new SimpleConsumer({
    endpoints,
    consumerGroup: group,
    subscriptions: new Map().set(topic, '*'),
  });
  await consumer.startup();
  let received = 0;
  const deadline = Date.now() + 20000;
  while (received < sent && Date.now() < deadline) {
    for (const message of await consumer.receive(16, 30000)) {
      await consumer.ack(message);
      received += 1;
    }
  }
  await consumer.shutdown();
  process.stdout.write(JSON.stringify({ sent, received }) + '\n');
}

main().catch(error => {
  process.stderr.write(`failed: ${error && error.stack ? error.stack : error}\n`);
  process.exit(2);
});
