// openai_client.cjs - the official openai npm client against a running lazyserve
// (tests/test_serve.c starts it and runs this with node): completions and chat
// completions, whole and streamed, with the RAG extension (documents); the
// models list; an unknown document id as the client's NotFoundError; 16
// concurrent streams equal to the whole answers; a stream aborted mid-way frees
// its slot and documents (the server's /metrics). Prints 'N passed, N failed'.
// Environment: LZ_SERVE_URL (http://127.0.0.1:PORT), LZ_DOCS (ids, comma-separated),
// LZ_QUESTION. The package comes from build/node (NODE_PATH): tools/deps.sh.
'use strict';
const OpenAI = require('openai');

const base = process.env.LZ_SERVE_URL;
const docs = (process.env.LZ_DOCS || '').split(',').filter(Boolean);
const question = process.env.LZ_QUESTION || 'What is the capital of Foxaria?';
let passed = 0, failed = 0;
function check(ok, what) {
  if (ok) passed++;
  else { failed++; console.error('FAIL ' + what); }
}

async function metrics() {
  const r = await fetch(base + '/metrics');
  const text = await r.text();
  const get = (name) => {
    const m = text.match(new RegExp('^' + name.replace(/[{}"]/g, (c) => '\\' + c) + ' (\\S+)$', 'm'));
    return m ? Number(m[1]) : NaN;
  };
  return { running: get('lazy_running_requests'), held: get('lazy_cache_held_entries{tier="host"}'),
           reserved: get('lazy_reserved_bytes'), cancelled: get('lazy_requests_total{status="cancelled"}') };
}

async function main() {
  const client = new OpenAI({ baseURL: base + '/v1', apiKey: 'unused', maxRetries: 0, timeout: 60000 });
  const models = await client.models.list();
  const model = models.data[0] && models.data[0].id;
  check(typeof model === 'string' && model.length > 0, 'models.list gives the served model');

  // completions, whole and streamed: the same text
  const whole = await client.completions.create({ model, prompt: question, max_tokens: 24, documents: docs });
  const text = whole.choices[0].text;
  check(typeof text === 'string' && text.length > 0, 'completion text: ' + JSON.stringify(text));
  check(whole.usage && whole.usage.completion_tokens > 0, 'completion usage');
  check(Array.isArray(whole.sources) && whole.sources.length === docs.length &&
        whole.sources.every((s, i) => s.id === docs[i] && s.tokens > 0), 'completion sources');
  let streamed = '', chunks = 0, finish = null;
  const stream = await client.completions.create({ model, prompt: question, max_tokens: 24, documents: docs, stream: true });
  for await (const c of stream) {
    chunks++;
    streamed += c.choices[0].text || '';
    if (c.choices[0].finish_reason) finish = c.choices[0].finish_reason;
  }
  check(streamed === text, 'streamed completion equals whole: ' + JSON.stringify(streamed) + ' vs ' + JSON.stringify(text));
  check(chunks >= 2 && (finish === 'stop' || finish === 'length'), 'stream chunks and finish_reason ' + finish);

  // chat, whole and streamed
  const messages = [{ role: 'system', content: 'ignored' }, { role: 'user', content: question }];
  const chat = await client.chat.completions.create({ model, messages, max_tokens: 24, documents: docs });
  const answer = chat.choices[0].message.content;
  check(chat.object === 'chat.completion' && chat.choices[0].message.role === 'assistant' && answer === text,
        'chat answer equals the completion: ' + JSON.stringify(answer));
  let chatStreamed = '', role = null;
  const cs = await client.chat.completions.create({ model, messages, max_tokens: 24, documents: docs, stream: true,
                                                    stream_options: { include_usage: true } });
  let usage = null;
  for await (const c of cs) {
    if (c.usage) usage = c.usage;
    if (!c.choices.length) continue;
    if (c.choices[0].delta.role) role = c.choices[0].delta.role;
    chatStreamed += c.choices[0].delta.content || '';
  }
  check(chatStreamed === answer && role === 'assistant', 'streamed chat equals whole chat');
  check(usage && usage.completion_tokens > 0, 'include_usage gives a usage chunk');

  // an unknown document id: the client's NotFoundError, naming it
  try {
    await client.completions.create({ model, prompt: question, documents: ['no-such-document-7'] });
    check(false, 'unknown document accepted');
  } catch (e) {
    check(e instanceof OpenAI.NotFoundError && e.status === 404 && /no-such-document-7/.test(e.message),
          'unknown document: ' + e.status + ' ' + e.message);
  }
  // a bad field: BadRequestError
  try {
    await client.completions.create({ model, prompt: question, max_tokens: 'lots' });
    check(false, 'a bad max_tokens accepted');
  } catch (e) {
    check(e instanceof OpenAI.BadRequestError && e.status === 400, 'bad max_tokens: ' + e.status);
  }

  // 16 concurrent streams, each equal to the whole answer
  const many = await Promise.all(Array.from({ length: 16 }, async () => {
    const s = await client.chat.completions.create({ model, messages, max_tokens: 24, documents: docs, stream: true });
    let t = '';
    for await (const c of s) t += (c.choices[0] && c.choices[0].delta.content) || '';
    return t;
  }));
  check(many.every((t) => t === answer), '16 concurrent streams equal the whole answer');

  // a stream aborted mid-way: its slot and documents are freed
  const before = await metrics();
  const long = await client.completions.create({ model, prompt: question, max_tokens: 2000, documents: docs,
                                                 ignore_eos: true, stream: true });
  let got = 0;
  for await (const c of long) {
    if (++got >= 3) { long.controller.abort(); break; }
  }
  let m = await metrics();
  for (let i = 0; i < 100 && (m.running !== 0 || m.held !== 0 || m.cancelled <= before.cancelled); i++) {
    await new Promise((r) => setTimeout(r, 50));
    m = await metrics();
  }
  check(m.running === 0 && m.held === 0 && m.reserved === 0 && m.cancelled === before.cancelled + 1,
        'aborted stream freed: ' + JSON.stringify(m));
  console.log(`${passed} passed, ${failed} failed`);
}

main().catch((e) => {
  console.error('FAIL ' + (e && e.stack || e));
  console.log(`${passed} passed, ${failed + 1} failed`);
  process.exitCode = 1;
});
