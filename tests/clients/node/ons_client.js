// Scenarios run by the Node.js RocketMQ 4.x client (npm ali-ons 3.12.0).
//
// Usage: node ons_client.js NAMESRV SCENARIO [TOPIC]. NAMESRV is a broker's remoting
// address (every broker answers name-server requests). Prints one JSON object
// (the scenario's observations) as its last stdout line.
'use strict';

const { Consumer, Producer, Message } = require('ali-ons');
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

// A push consumer of the topic; a producer sends one message a second until the
// consumer has COUNT of them (it starts from the queues' ends) or 40 s passed.
async function consume(namesrv, topic = 'normal', count = '5') {
  const consumer = new Consumer({ consumerGroup: 'CG_ONS', nameSrv: namesrv, httpclient });
  const received = [];
  consumer.on('error', () => {}); // "offset not found" for a new group: it starts at the end
  consumer.subscribe(topic, '*', async message => {
    // ali-ons names a received message by its offset id; the id it was sent with
    // travels as the UNIQ_KEY property.
    received.push({ id: message.properties.UNIQ_KEY, offsetId: message.msgId, body: message.body.toString() });
  });
  await consumer.ready();
  const producer = new Producer({ producerGroup: 'PG_ONS_PUSH', nameSrv: namesrv, httpclient });
  await producer.ready();
  const sent = [];
  const deadline = Date.now() + 40000;
  try {
    while (received.length < Number(count) && Date.now() < deadline) {
      const body = `ons-push-${sent.length}`;
      const result = await producer.send(new Message(topic, 'p', body));
      sent.push({ id: result.msgId, body });
      await new Promise(resolve => setTimeout(resolve, 1000));
    }
  } finally {
    await producer.close();
    await consumer.close();
  }
  return { sent, received };
}

const SCENARIOS = { produce, consume };

SCENARIOS[process.argv[3]](process.argv[2], ...process.argv.slice(4)).then(out => {
  console.log(JSON.stringify(out));
  process.exit(0);
}, err => {
  console.error(err);
  process.exit(1);
});
