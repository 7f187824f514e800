// Drives `vericache serve` with the official OpenAI client for Node and prints one
// JSON object of what came back (read by tests/server/openai_node_test.cpp).
//   node openai_client.js BASE_URL API_KEY
const OpenAI = require('openai');

async function main() {
  const [baseURL, apiKey] = process.argv.slice(2);
  const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
  const prompt = '<|begin_of_text|>def fibonacci(n):';
  const extra = { mode: 'vericache', compressor: 'snapkv', ratio: 4, draft: 8 };
  const out = {};

  out.models = (await client.models.list()).data.map((m) => m.id);

  const c = await client.completions.create({ model: 'tinycode', prompt, max_tokens: 20, ...extra });
  out.completion = { text: c.choices[0].text, usage: c.usage, vericache: c.vericache };

  let text = '';
  let usage = null;
  const stream = await client.completions.create({
    model: 'tinycode', prompt, max_tokens: 20, stream: true,
    stream_options: { include_usage: true }, ...extra,
  });
  for await (const chunk of stream) {
    if (chunk.choices.length) text += chunk.choices[0].text;
    if (chunk.usage) usage = chunk.usage;
  }
  out.completion_stream = { text, usage };

  const messages = [{ role: 'user', content: 'add two numbers' }];
  const chat = await client.chat.completions.create({ model: 'tinycode', messages, max_tokens: 12 });
  out.chat = { text: chat.choices[0].message.content, finish: chat.choices[0].finish_reason };

  let chatText = '';
  const chatStream = await client.chat.completions.create({
    model: 'tinycode', messages, max_tokens: 12, stream: true,
  });
  for await (const chunk of chatStream) chatText += chunk.choices[0]?.delta?.content ?? '';
  out.chat_stream = { text: chatText };

  const lc = await client.completions.create({
    model: 'tinycode', prompt, max_tokens: 6, logprobs: 2, ...extra,
  });
  const lp = lc.choices[0].logprobs;
  out.completion_logprobs = {
    tokens: lp.tokens, token_logprobs: lp.token_logprobs, text_offset: lp.text_offset,
    top_sizes: lp.top_logprobs.map((o) => Object.keys(o).length),
  };

  const lchat = await client.chat.completions.create({
    model: 'tinycode', messages, max_tokens: 6, logprobs: true, top_logprobs: 2,
  });
  out.chat_logprobs = lchat.choices[0].logprobs.content;

  const streamedContent = [];
  const lchatStream = await client.chat.completions.create({
    model: 'tinycode', messages, max_tokens: 6, logprobs: true, top_logprobs: 2, stream: true,
  });
  for await (const chunk of lchatStream) {
    const l = chunk.choices[0]?.logprobs;
    if (l) streamedContent.push(...l.content);
  }
  out.chat_stream_logprobs = streamedContent;

  try {
    await new OpenAI({ baseURL, apiKey: 'wrong', maxRetries: 0 }).models.list();
    out.bad_key = { status: 200 };
  } catch (e) {
    out.bad_key = { status: e.status, code: e.code ?? null };
  }
  try {
    await client.completions.create({ model: 'tinycode', prompt, max_tokens: 0 });
    out.bad_request = { status: 200 };
  } catch (e) {
    out.bad_request = { status: e.status, param: e.param ?? null };
  }
  process.stdout.write(JSON.stringify(out) + '\n');
}

main().catch((e) => {
  process.stderr.write(`openai_client.js: ${e.stack || e}\n`);
  process.exit(1);
});
