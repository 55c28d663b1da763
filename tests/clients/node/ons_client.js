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
  const sent = await sendWhileConsuming(namesrv, consumer, topic, 'push',
    () => received.length >= Number(count), () => true);
  return { sent, received };
}

// With CONSUMER ready, a producer of group PG_ONS_<NAME> sends `ons-<name>-<n>` (tag:
// the name's first letter) to TOPIC every half second while sending() says so, until
// done() or 40 s passed; then both close. What was sent.
async function sendWhileConsuming(namesrv, consumer, topic, name, done, sending) {
  await consumer.ready();
  const group = `PG_ONS_${name.toUpperCase()}`;
  const producer = new Producer({ producerGroup: group, nameSrv: namesrv, httpclient });
  await producer.ready();
  const sent = [];
  const deadline = Date.now() + 40000;
  try {
    while (!done() && Date.now() < deadline) {
      if (sending()) {
        const body = `ons-${name}-${sent.length}`;
        const result = await producer.send(new Message(topic, name[0], body));
        sent.push({ id: result.msgId, body });
      }
      await new Promise(resolve => setTimeout(resolve, 500));
    }
  } finally {
    await producer.close();
    await consumer.close();
  }
  return sent;
}

// A push consumer that fails the first message it gets (ACTION_RETRY: the client
// gives it back with CONSUMER_SEND_MSG_BACK, or on failure re-sends it itself) and
// takes the rest; a producer sends one message a second until the consumer has had
// the failed one again, or 40 s passed. Each delivery as the consumer saw it.
async function retry(namesrv, topic = 'normal') {
  const consumer = new Consumer({ consumerGroup: 'CG_ONS_RETRY', nameSrv: namesrv, httpclient });
  const received = [];
  let again = false;
  consumer.on('error', () => {});
  consumer.subscribe(topic, '*', async message => {
    received.push({
      id: message.properties.UNIQ_KEY, body: message.body.toString(), topic: message.topic,
      reconsume_times: message.reconsumeTimes, retry_topic: message.properties.RETRY_TOPIC || '',
      at: Date.now() / 1000,
    });
    if (received.length === 1) return Consumer.ACTION_RETRY;
    const last = received[received.length - 1];
    if (last.body === received[0].body && last.reconsume_times > 0) again = true;
  });
  const sent = await sendWhileConsuming(namesrv, consumer, topic, 'retry',
    () => again, () => received.length === 0);
  return { sent, received };
}

const SCENARIOS = { produce, consume, retry };

SCENARIOS[process.argv[3]](process.argv[2], ...process.argv.slice(4)).then(out => {
  console.log(JSON.stringify(out));
  process.exit(0);
}, err => {
  console.error(err);
  process.exit(1);
});
