// stripe-node pointed at the payments demo, for TestStripeNodeSDK
// (cmd/storm/stripesdk_test.go). It reads a plan from stdin,
//
//   {"url": "http://127.0.0.1:PORT", "secret": "sk_test_…", "workers": 20,
//    "ops": [{"op": "charge", "n": 7, "amount": 1007},
//            {"op": "refund", "n": 7, "charge": "ch_…", "amount": 100},
//            {"op": "charge", "n": 8, "amount": 1008, "key": "…"}]}
//
// makes each call with the SDK as an integration would (its own
// idempotency keys unless the plan names one, its own retries:
// maxNetworkRetries 3, 1 s per attempt), and prints one JSON line per
// call with what the SDK saw: the object it returned or the error it
// threw, how many requests it sent (from its 'request' events), the
// idempotency keys they carried, and whether the answer was a replay.
// The Go test holds the lines against the demo's books.
'use strict';

const Stripe = require('stripe');

async function main() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  const plan = JSON.parse(Buffer.concat(chunks).toString('utf8'));
  const url = new URL(plan.url);
  let next = 0;
  const worker = async () => {
    // One client per worker, so that its events are its current call's.
    const stripe = new Stripe(plan.secret, {
      host: url.hostname,
      port: url.port,
      protocol: 'http',
      maxNetworkRetries: 3,
      timeout: 1000,
      telemetry: false,
    });
    let seen = null;
    stripe.on('request', (e) => {
      seen.requests++;
      seen.keys.add(e.idempotency_key || '');
    });
    while (next < plan.ops.length) {
      const op = plan.ops[next++];
      seen = {requests: 0, keys: new Set()};
      const options = op.key ? {idempotencyKey: op.key} : {};
      const out = {op: op.op, n: op.n};
      try {
        let obj;
        if (op.op === 'charge') {
          obj = await stripe.charges.create({
            amount: op.amount,
            currency: 'usd',
            source: 'tok_visa',
            description: 'order ' + op.n,
            metadata: {order: String(op.n)},
          }, options);
        } else {
          obj = await stripe.refunds.create({charge: op.charge, amount: op.amount}, options);
        }
        out.id = obj.id;
        out.amount = obj.amount;
        out.charge = obj.charge || '';
        const headers = (obj.lastResponse && obj.lastResponse.headers) || {};
        out.replayed = headers['idempotent-replayed'] === 'true';
      } catch (err) {
        out.error = {
          class: err.type || err.name, // StripeIdempotencyError, StripeConnectionError, …
          type: err.rawType || '',     // Stripe's error type: idempotency_error, …
          code: err.code || '',
          status: err.statusCode || 0,
          message: String(err.message),
        };
      }
      out.attempts = seen.requests;
      out.keys = [...seen.keys];
      process.stdout.write(JSON.stringify(out) + '\n');
    }
  };
  await Promise.all(Array.from({length: plan.workers || 1}, worker));
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
