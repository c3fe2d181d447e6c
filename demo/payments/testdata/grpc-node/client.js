'use strict';
// A gRPC client of the payments demo, written as a Node.js service would
// write one with @grpc/grpc-js, from its own, newer charges.proto. It
// makes OPERATIONS charges one after another, each for its own account
// (PREFIX and the operation's number), each with one idempotency key of
// its own for all its attempts, and retries an attempt that failed on
// the way (UNAVAILABLE, a connection dropped; ABORTED; DEADLINE_EXCEEDED;
// CANCELLED) after a jittered exponential backoff. Every attempt builds its request
// anew, its map entries inserted in another order, so that no two attempts
// of an operation send the same bytes.
//
//   node client.js ADDRESS OPERATIONS PREFIX
//
// It prints one JSON line per attempt: the operation, the attempt's
// number, key, account and request bytes' SHA-256, the status code, and,
// for a reply, its charge id and whether it was a replay. It exits 1 if an
// operation ends without a charge.

const crypto = require('node:crypto');
const path = require('node:path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const [address, operations, prefix] = process.argv.slice(2);
if (!address || !(Number(operations) > 0) || !prefix) {
  console.error('usage: node client.js ADDRESS OPERATIONS PREFIX');
  process.exit(2);
}

const definition = protoLoader.loadSync(path.join(__dirname, 'charges.proto'), { keepCase: true, oneofs: true });
const payments = grpc.loadPackageDefinition(definition).payments.v1;
const serialize = definition['payments.v1.Charges'].Create.requestSerialize;

// The codes of an attempt that may not have reached the server, or whose
// answer was lost: retried with the same key. CANCELLED is among them
// because this client never cancels a call, and grpc-js may report a
// connection that broke under a call as CANCELLED.
const retried = new Set([grpc.status.UNAVAILABLE, grpc.status.ABORTED, grpc.status.DEADLINE_EXCEEDED,
  grpc.status.CANCELLED]);
const maxAttempts = 8;
const attemptTimeout = 5000; // ms
const baseBackoff = 25; // ms
const maxBackoff = 1000; // ms

// inOrder returns an object of entries, inserted from the n-th on.
function inOrder(entries, n) {
  const k = n % entries.length;
  return Object.fromEntries(entries.slice(k).concat(entries.slice(0, k)));
}

// request is the charge of operation op, built for its n-th attempt.
function request(op, n) {
  return {
    fields: inOrder([
      ['amount', { numberValue: 1000 + op }],
      ['currency', { stringValue: 'usd' }],
      ['customer', { stringValue: `cus_${op}` }],
      ['description', { stringValue: `Order #${op}` }],
    ], n),
    labels: inOrder([['cart', `cart_${op}`], ['campaign', 'spring'], ['region', 'eu'], ['team', 'web']], n),
    origin: {
      '@type': 'type.googleapis.com/payments.v1.Origin',
      channel: 'checkout',
      attributes: inOrder([['app', 'node'], ['build', '42'], ['locale', 'en-GB']], n),
    },
  };
}

// send makes one attempt: the call, with the key and the account's token.
function send(client, req, key, account) {
  return new Promise((resolve) => {
    const md = new grpc.Metadata();
    md.set('authorization', `Bearer ${account}`);
    md.set('idempotency-key', key);
    let replayed = false;
    const call = client.Create(req, md, { deadline: Date.now() + attemptTimeout }, (err, reply) =>
      resolve({ err, reply, replayed }));
    call.on('metadata', (header) => {
      replayed = header.get('idempotent-replayed')[0] === 'true';
    });
  });
}

// backoff is the wait after the n-th attempt: full jitter below a ceiling
// that doubles from baseBackoff up to maxBackoff.
function backoff(n) {
  return Math.random() * Math.min(maxBackoff, baseBackoff * 2 ** (n - 1));
}

async function main() {
  const client = new payments.Charges(address, grpc.credentials.createInsecure(), {
    'grpc.initial_reconnect_backoff_ms': 50,
    'grpc.max_reconnect_backoff_ms': 500,
  });
  for (let op = 1; op <= Number(operations); op++) {
    const key = crypto.randomUUID();
    const account = `${prefix}${op}`;
    for (let n = 1; ; n++) {
      const req = request(op, n);
      const sent = crypto.createHash('sha256').update(serialize(req)).digest('hex');
      const { err, reply, replayed } = await send(client, req, key, account);
      const line = { op, attempt: n, key, account, request: sent, code: err ? err.code : grpc.status.OK };
      if (!err) {
        Object.assign(line, { charge: reply.fields.id.stringValue, replayed });
        console.log(JSON.stringify(line));
        break;
      }
      line.error = err.details;
      console.log(JSON.stringify(line));
      if (!retried.has(err.code) || n >= maxAttempts) {
        process.exitCode = 1;
        break;
      }
      await new Promise((resolve) => setTimeout(resolve, backoff(n)));
    }
  }
  client.close();
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
