// Scenarios run by the Node.js RocketMQ 4.x client (npm ali-ons 3.12.0).
//
// Usage: node ons_client.js NAMESRV SCENARIO [TOPIC]. NAMESRV is a broker's remoting
// address (every broker answers name-server requests). Prints one JSON object
// (the scenario's observations) as its last stdout line.
'use strict';

const { Producer, Message } = require('ali-ons');
const httpclient = require('urllib');

async function produce(namesrv, topic = 'normal') {
  const producer = new Producer({ producerGroup: 'PG_ONS', nameSrv: namesrv, httpclient });
  await producer.ready();
  const out = { sync: [], orderly: [] };
  try {
    for (let i = 0; i < 3; i++) {
      const message = new Message(topic, `tag${i}`, `ons-${i}`);
      message.keys = [ `key${i}`, `other${i}` ];
      message.properties.color = 'blue';
      message.properties.index = String(i);
      const result = await producer.send(message);
      out.sync.push({ status: result.sendStatus, id: result.msgId, queue: Number(result.messageQueue.queueId), offset: result.queueOffset });
    }
    const big = await producer.send(new Message(topic, 'big', 'y'.repeat(10000)));
    out.big = { status: big.sendStatus, id: big.msgId };
    // FIFO: a queue selector picks one queue for every message of an order.
    for (let i = 0; i < 5; i++) {
      const message = new Message(topic, 'fifo', `order-${i}`);
      // (ali-ons treats a selected queue 0 as no selection: this key hashes to queue 2 of 4.)
      message.shardingKey = 'order-7';
      const result = await producer.send(message);
      out.orderly.push({ status: result.sendStatus, id: result.msgId, queue: Number(result.messageQueue.queueId), offset: result.queueOffset });
    }
  } finally {
    await producer.close();
  }
  return out;
}

const SCENARIOS = { produce };

SCENARIOS[process.argv[3]](process.argv[2], ...process.argv.slice(4)).then(out => {
  console.log(JSON.stringify(out));
  process.exit(0);
}, err => {
  console.error(err);
  process.exit(1);
});
